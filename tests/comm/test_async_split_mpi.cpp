// Async ordering under load, observer records, and sub-communicators (split).
#include "catch_aten.h"

#include <mutex>
#include <vector>

#include "comm/mpi_communicator.h"
#include "mpi_test_world.h"
#include "tensor_check.h"

using hlp::comm::OpKind;
using hlp::comm::OpRecord;
using hlp::comm::ReduceOp;

namespace {

class RecordingObserver : public hlp::comm::Observer {
 public:
  void on_comm_op(const OpRecord& record) override {
    std::lock_guard<std::mutex> lock(mutex_);
    records_.push_back(record);
  }
  std::vector<OpRecord> records() {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_;
  }

 private:
  std::mutex mutex_;
  std::vector<OpRecord> records_;
};

// Detaches the observer when a test case ends, whatever happens.
struct ObserverScope {
  explicit ObserverScope(hlp::comm::Communicator& comm) : comm(comm) {
    comm.set_observer(observer);
  }
  ~ObserverScope() { comm.set_observer(nullptr); }
  hlp::comm::Communicator& comm;
  std::shared_ptr<RecordingObserver> observer = std::make_shared<RecordingObserver>();
};

}  // namespace

TEST_CASE("many async ops of mixed kinds and sizes complete in issue order with right results",
          "[mpi][async]") {
  auto& comm = test_world();
  ObserverScope scope(comm);
  const int n = comm.size();
  const int r = comm.rank();
  const int kOps = 48;

  struct Issued {
    OpKind kind;
    int64_t numel;
    at::Tensor input, output;
    hlp::comm::WorkPtr work;
  };
  std::vector<Issued> issued;
  for (int k = 0; k < kOps; ++k) {
    // sizes from 0 to 256K elements, deliberately not monotone, so that a small op issued
    // after a big one would finish first if the queue did not keep order
    const int64_t numel = (k % 5 == 0) ? 0 : (int64_t(1) << ((k * 7) % 19)) + k;
    Issued op;
    op.numel = numel;
    op.kind = k % 3 == 0 ? OpKind::AllReduce : (k % 3 == 1 ? OpKind::AllGather
                                                           : OpKind::ReduceScatter);
    op.input = at::tensor(rank_values(r, numel), at::kFloat);
    if (op.kind == OpKind::AllReduce) {
      op.work = comm.all_reduce_async(op.input, ReduceOp::Sum);
    } else if (op.kind == OpKind::AllGather) {
      op.output = at::empty({numel * n}, at::kFloat);
      op.work = comm.all_gather_async(op.input, op.output);
    } else {
      op.output = at::empty({hlp::comm::shard_numel(numel, n)}, at::kFloat);
      op.work = comm.reduce_scatter_async(op.input, op.output, ReduceOp::Sum);
    }
    issued.push_back(op);
  }
  // Compute on this thread while the comm thread works through the queue (the overlap that
  // DDP/FSDP rely on); then waiting for the last op alone must imply every earlier op completed.
  at::Tensor a = at::eye(96, at::kFloat);
  for (int i = 0; i < 30; ++i) a = at::tanh(at::matmul(a, a) + 0.01);
  CHECK(a.isfinite().all().item<bool>());
  issued.back().work->wait();
  for (int k = 0; k < kOps; ++k) {
    INFO("op " << k);
    CHECK(issued[k].work->is_completed());
  }
  for (int k = 0; k < kOps; ++k) {
    const Issued& op = issued[k];
    op.work->wait();
    std::vector<double> expected;
    if (op.kind == OpKind::AllReduce) {
      for (int64_t i = 0; i < op.numel; ++i) expected.push_back(reduce_expected(ReduceOp::Sum, n, i, false));
      INFO("all_reduce op " << k << " numel " << op.numel);
      CHECK(mismatch(op.input, expected) == "");
    } else if (op.kind == OpKind::AllGather) {
      for (int64_t j = 0; j < op.numel * n; ++j) expected.push_back(contribution(j / op.numel, j % op.numel));
      INFO("all_gather op " << k << " numel " << op.numel);
      CHECK(mismatch(op.output, expected) == "");
    } else {
      auto range = hlp::comm::shard_range(op.numel, n, r);
      expected.assign(op.output.numel(), 0.0);
      for (int64_t i = range.begin; i < range.end; ++i)
        expected[i - range.begin] = reduce_expected(ReduceOp::Sum, n, i, false);
      INFO("reduce_scatter op " << k << " numel " << op.numel);
      CHECK(mismatch(op.output, expected) == "");
    }
  }
  // The observer saw them in issue order, back to back.
  std::vector<OpRecord> records = scope.observer->records();
  REQUIRE(records.size() == static_cast<size_t>(kOps));
  // (checked below, after a sync op has been queued behind a fresh batch)
  for (int k = 0; k < kOps; ++k) {
    INFO("record " << k);
    CHECK(records[k].kind == issued[k].kind);
    CHECK(records[k].bytes == issued[k].numel * 4);
    CHECK(records[k].async);
    CHECK(records[k].group_size == n);
    CHECK(records[k].start_s <= records[k].end_s);
    if (k > 0) CHECK(records[k - 1].end_s <= records[k].start_s);
  }

  // A sync op issued while async ops are queued runs after them: when it returns, they are done.
  std::vector<hlp::comm::WorkPtr> batch;
  std::vector<at::Tensor> tensors;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(at::full({(int64_t(1) << 16) + k}, 1.0, at::kFloat));
    batch.push_back(comm.all_reduce_async(tensors.back(), ReduceOp::Sum));
  }
  at::Tensor sync = at::ones({3}, at::kFloat);
  comm.all_reduce(sync);
  for (int k = 0; k < 8; ++k) {
    INFO("queued op " << k);
    CHECK(batch[k]->is_completed());
    CHECK(tensors[k][0].item<float>() == float(n));
  }
  CHECK(at::equal(sync, at::full({3}, float(n), at::kFloat)));
  records = scope.observer->records();
  REQUIRE(records.size() == static_cast<size_t>(kOps + 9));
  CHECK_FALSE(records.back().async);
  CHECK(records.back().bytes == 12);
}

TEST_CASE("the observer gets kind, bytes, peer and sync/async of every op", "[mpi][observer]") {
  auto& comm = test_world();
  ObserverScope scope(comm);
  const int n = comm.size();
  at::Tensor x = at::ones({100}, at::kBFloat16);
  comm.all_reduce(x);
  comm.all_reduce_async(x, ReduceOp::Max)->wait();
  comm.broadcast(x, 0);
  comm.barrier();
  at::Tensor received = at::empty_like(x);
  comm.send_async(x, (comm.rank() + 1) % n, 0);
  comm.recv(received, (comm.rank() + n - 1) % n, 0);
  comm.barrier();  // the send has surely completed and been reported by now
  std::vector<OpRecord> records = scope.observer->records();
  REQUIRE(records.size() == 7);
  CHECK(records[0].kind == OpKind::AllReduce);
  CHECK(records[0].bytes == 200);
  CHECK_FALSE(records[0].async);
  CHECK(records[0].peer == -1);
  CHECK(records[1].async);
  CHECK(records[2].kind == OpKind::Broadcast);
  CHECK(records[3].kind == OpKind::Barrier);
  CHECK(records[3].bytes == 0);
  // send and recv both finish before the second barrier, in either order
  int sends = 0, recvs = 0;
  for (int k : {4, 5}) {
    if (records[k].kind == OpKind::Send) {
      ++sends;
      CHECK(records[k].peer == (comm.rank() + 1) % n);
      CHECK(records[k].async);
    }
    if (records[k].kind == OpKind::Recv) {
      ++recvs;
      CHECK(records[k].peer == (comm.rank() + n - 1) % n);
      CHECK_FALSE(records[k].async);
    }
    CHECK(records[k].bytes == 200);
  }
  CHECK(sends == 1);
  CHECK(recvs == 1);
  CHECK(records[6].kind == OpKind::Barrier);
  CHECK(std::string(hlp::comm::op_kind_name(OpKind::ReduceScatter)) == "reduce_scatter");
}

TEST_CASE("split groups ranks by color and orders them by key", "[mpi][split]") {
  auto& comm = test_world();
  ObserverScope scope(comm);
  const int n = comm.size();
  const int r = comm.rank();
  // color by parity, key reversed: the highest old rank gets new rank 0
  auto child = comm.split(r % 2, -r);
  REQUIRE(child);
  const int expected_size = (n + 1 - r % 2) / 2;
  CHECK(child->size() == expected_size);
  // members, gathered on the child: old ranks of the same parity, descending
  at::Tensor members = child->all_gather(at::full({1}, r, at::kLong)).view({-1});
  for (int j = 0; j < child->size(); ++j) {
    const int64_t old_rank = members[j].item<int64_t>();
    CHECK(old_rank % 2 == r % 2);
    if (j > 0) CHECK(old_rank < members[j - 1].item<int64_t>());
    if (old_rank == r) CHECK(child->rank() == j);
  }
  // a collective on the child only sums its members
  at::Tensor x = at::full({3}, double(r), at::kDouble);
  child->all_reduce(x);
  double want = 0;
  for (int j = r % 2; j < n; j += 2) want += j;
  CHECK(at::equal(x, at::full({3}, want, at::kDouble)));
  // the child inherited the observer: it saw the child's all_gather and all_reduce
  int child_ops = 0;
  for (const OpRecord& record : scope.observer->records())
    if (record.group_size == child->size() && record.group_size != n) ++child_ops;
  if (child->size() != n) CHECK(child_ops == 2);
  CHECK(child->timeout_s() == comm.timeout_s());
}

TEST_CASE("split with a negative color leaves the rank out", "[mpi][split]") {
  auto& comm = test_world();
  auto child = comm.split(comm.rank() == 0 ? -1 : 0, 0);
  if (comm.rank() == 0) {
    CHECK(child == nullptr);
  } else {
    REQUIRE(child);
    CHECK(child->size() == comm.size() - 1);
    CHECK(child->rank() == comm.rank() - 1);
  }
}

TEST_CASE("async ops on two communicators interleave without interfering", "[mpi][async][split]") {
  auto& comm = test_world();
  auto dup = comm.split(0, comm.rank());  // same members, own thread
  REQUIRE(dup);
  const int n = comm.size();
  std::vector<at::Tensor> a, b;
  std::vector<hlp::comm::WorkPtr> works;
  for (int k = 0; k < 10; ++k) {
    a.push_back(at::full({1000 + k}, double(comm.rank() + k), at::kDouble));
    b.push_back(at::full({50000 - k}, double(2 * comm.rank()), at::kDouble));
    works.push_back(comm.all_reduce_async(a.back(), ReduceOp::Sum));
    works.push_back(dup->all_reduce_async(b.back(), ReduceOp::Max));
  }
  for (auto& w : works) w->wait();
  const double rank_sum = n * (n - 1) / 2.0;
  for (int k = 0; k < 10; ++k) {
    CHECK(at::equal(a[k], at::full({1000 + k}, rank_sum + n * k, at::kDouble)));
    CHECK(at::equal(b[k], at::full({50000 - k}, 2.0 * (n - 1), at::kDouble)));
  }
}
