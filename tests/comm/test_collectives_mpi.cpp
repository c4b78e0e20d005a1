// Every collective, sync and async, every dtype, contiguous or strided, against values each rank
// computes locally. Run under mpiexec at 2 and 4 ranks.
#include "catch_aten.h"

#include <chrono>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/mpi_op_queue.h"
#include "mpi_test_world.h"
#include "tensor_check.h"

using hlp::comm::ReduceOp;

namespace {
const std::vector<int64_t> kSizes{0, 1, 3, 5, 1001};  // includes N < n and N % n != 0
const std::vector<ReduceOp> kOps{ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
}  // namespace

TEST_CASE("all_reduce matches the locally computed reduction", "[mpi][all_reduce]") {
  auto& comm = test_world();
  const int n = comm.size();
  for (c10::ScalarType dtype : all_dtypes())
    for (int64_t numel : kSizes)
      for (ReduceOp op : kOps)
        for (bool contiguous : {true, false})
          for (bool async : {false, true}) {
            at::Tensor t = make_tensor(numel, dtype, contiguous);
            fill(t, rank_values(comm.rank(), numel));
            if (async) {
              auto work = comm.all_reduce_async(t, op);
              work->wait();
              CHECK(work->is_completed());
            } else {
              comm.all_reduce(t, op);
            }
            std::vector<double> expected(numel);
            for (int64_t i = 0; i < numel; ++i)
              expected[i] = reduce_expected(op, n, i, dtype == c10::ScalarType::Long);
            INFO(describe(dtype, numel, contiguous, async) << " op=" << reduce_op_name(op));
            CHECK(mismatch(t, expected) == "");
          }
}

TEST_CASE("all_reduce of a transposed 2-D tensor reduces element-wise", "[mpi][all_reduce]") {
  auto& comm = test_world();
  at::Tensor base = at::arange(12, at::kFloat).view({3, 4}) * (comm.rank() + 1);
  at::Tensor t = base.t();  // [4, 3], non-contiguous
  REQUIRE_FALSE(t.is_contiguous());
  comm.all_reduce(t, ReduceOp::Sum);
  const double rank_sum = comm.size() * (comm.size() + 1) / 2.0;
  at::Tensor expected = at::arange(12, at::kFloat).view({3, 4}).t() * rank_sum;
  CHECK(at::equal(t, expected));
}

TEST_CASE("all_gather concatenates inputs in rank order, truncated to the output size",
          "[mpi][all_gather]") {
  auto& comm = test_world();
  const int n = comm.size();
  for (c10::ScalarType dtype : all_dtypes())
    for (int64_t m : {0, 1, 3, 257})
      for (bool contiguous : {true, false})
        for (bool async : {false, true})
          // full output n*m, and a truncated one (the inverse of a non-divisible shard)
          for (int64_t out_numel : {n * m, m > 0 ? (m - 1) * n + 1 : int64_t(0)}) {
            at::Tensor input = make_tensor(m, dtype, contiguous);
            fill(input, rank_values(comm.rank(), m));
            at::Tensor output = make_tensor(out_numel, dtype, contiguous);
            if (async) {
              comm.all_gather_async(input, output)->wait();
            } else {
              comm.all_gather(input, output);
            }
            std::vector<double> expected(out_numel);
            for (int64_t j = 0; j < out_numel; ++j) expected[j] = contribution(j / m, j % m);
            INFO(describe(dtype, m, contiguous, async) << " out_numel=" << out_numel);
            CHECK(mismatch(output, expected) == "");
          }
}

TEST_CASE("allocating all_gather returns shape (n, *input shape)", "[mpi][all_gather]") {
  auto& comm = test_world();
  at::Tensor input = at::full({2, 3}, comm.rank(), at::kLong);
  at::Tensor out = comm.all_gather(input);
  REQUIRE(out.sizes() == at::IntArrayRef({comm.size(), 2, 3}));
  for (int r = 0; r < comm.size(); ++r) CHECK(at::equal(out[r], at::full({2, 3}, r, at::kLong)));
}

TEST_CASE("reduce_scatter gives each rank the reduction of its zero-padded shard",
          "[mpi][reduce_scatter]") {
  auto& comm = test_world();
  const int n = comm.size();
  const int r = comm.rank();
  for (c10::ScalarType dtype : all_dtypes())
    for (int64_t numel : {int64_t(0), int64_t(1), int64_t(3), int64_t(5), int64_t(n * 250),
                          int64_t(1001)})
      for (ReduceOp op : kOps)
        for (bool contiguous : {true, false})
          for (bool async : {false, true}) {
            at::Tensor input = make_tensor(numel, dtype, contiguous);
            fill(input, rank_values(r, numel));
            const int64_t shard = hlp::comm::shard_numel(numel, n);
            at::Tensor output = make_tensor(shard, dtype, contiguous);
            if (async) {
              comm.reduce_scatter_async(input, output, op)->wait();
            } else {
              comm.reduce_scatter(input, output, op);
            }
            std::vector<double> expected(shard, 0.0);
            const hlp::comm::ShardRange range = hlp::comm::shard_range(numel, n, r);
            for (int64_t i = range.begin; i < range.end; ++i)
              expected[i - range.begin] =
                  reduce_expected(op, n, i, dtype == c10::ScalarType::Long);
            INFO(describe(dtype, numel, contiguous, async) << " op=" << reduce_op_name(op)
                                                           << " shard=" << shard);
            CHECK(mismatch(output, expected) == "");
          }
}

TEST_CASE("reduce_scatter then all_gather restores the element count and the sum",
          "[mpi][reduce_scatter][all_gather]") {
  auto& comm = test_world();
  const int64_t numel = 1001;
  at::Tensor x = at::tensor(rank_values(comm.rank(), numel), at::kFloat);
  at::Tensor shard = comm.reduce_scatter(x);
  at::Tensor full = at::empty({numel}, at::kFloat);
  comm.all_gather(shard, full);
  at::Tensor summed = x.clone();
  comm.all_reduce(summed);
  CHECK(at::equal(full, summed));
}

TEST_CASE("broadcast copies the root's tensor to every rank", "[mpi][broadcast]") {
  auto& comm = test_world();
  for (c10::ScalarType dtype : all_dtypes())
    for (int root = 0; root < comm.size(); ++root)
      for (int64_t numel : {0, 1, 1001})
        for (bool contiguous : {true, false})
          for (bool async : {false, true}) {
            at::Tensor t = make_tensor(numel, dtype, contiguous);
            fill(t, rank_values(comm.rank(), numel));
            if (async)
              comm.broadcast_async(t, root)->wait();
            else
              comm.broadcast(t, root);
            INFO(describe(dtype, numel, contiguous, async) << " root=" << root);
            CHECK(mismatch(t, rank_values(root, numel)) == "");
          }
}

TEST_CASE("send/recv around a ring, both async, completes without deadlock", "[mpi][p2p]") {
  auto& comm = test_world();
  const int n = comm.size();
  const int next = (comm.rank() + 1) % n;
  const int prev = (comm.rank() + n - 1) % n;
  // 1M floats (4 MiB) is past MPI's eager limit: a blocking send here would deadlock the ring.
  for (c10::ScalarType dtype : all_dtypes())
    for (int64_t numel : {int64_t(0), int64_t(7), int64_t(1) << 20})
      for (bool contiguous : {true, false}) {
        at::Tensor out = make_tensor(numel, dtype, contiguous);
        fill(out, rank_values(comm.rank(), numel));
        at::Tensor in = make_tensor(numel, dtype, contiguous);
        auto sent = comm.send_async(out, next, /*tag=*/3);
        auto received = comm.recv_async(in, prev, /*tag=*/3);
        received->wait();
        sent->wait();
        INFO(describe(dtype, numel, contiguous, true));
        CHECK(mismatch(in, rank_values(prev, numel)) == "");
      }
}

TEST_CASE("a pending send nobody waits on is polled with a backoff, not every 50 us",
          "[mpi][p2p]") {
  // The comm thread tests a pending op at most every 1 ms (after a short fast start) while no
  // caller waits on it: it runs on the core the caller computes on. At a fixed 50 us it made
  // 20000 wake-ups a second (rank 0 here: up to ~8000 rounds in the 400 ms).
  auto& comm = test_world();
  if (comm.size() < 2) return;
  const int64_t numel = int64_t(1) << 20;  // 4 MiB: rendezvous, pending until rank 1 receives
  const auto pause = std::chrono::milliseconds(400);
  if (comm.rank() == 0) {
    at::Tensor out = at::full({numel}, 3.0, at::kFloat);
    auto sent = comm.send_async(out, 1, /*tag=*/7);
    const int64_t before = hlp::comm::mpi_p2p_poll_rounds();
    std::this_thread::sleep_for(pause);
    const int64_t rounds = hlp::comm::mpi_p2p_poll_rounds() - before;
    CHECK_FALSE(sent->is_completed());  // the send was pending all along
    sent->wait();
    // 400 rounds at 1 ms plus the first few at 50 us .. 500 us, plus slack for late wake-ups
    // (which only make fewer rounds)
    CHECK(rounds <= 400 + 20);
    CHECK(rounds > 0);
  } else if (comm.rank() == 1) {
    std::this_thread::sleep_for(pause + std::chrono::milliseconds(100));
    at::Tensor in = at::zeros({numel}, at::kFloat);
    comm.recv(in, 0, /*tag=*/7);
    CHECK(at::equal(in, at::full({numel}, 3.0, at::kFloat)));
  }
  comm.barrier();
}

TEST_CASE("recv matches sends by tag, not by order", "[mpi][p2p]") {
  auto& comm = test_world();
  if (comm.size() < 2) return;
  if (comm.rank() == 0) {
    comm.send(at::full({5}, 1.0, at::kDouble), 1, /*tag=*/1);
    comm.send(at::full({5}, 2.0, at::kDouble), 1, /*tag=*/2);
  } else if (comm.rank() == 1) {
    at::Tensor second = at::zeros({5}, at::kDouble);
    at::Tensor first = at::zeros({5}, at::kDouble);
    auto w2 = comm.recv_async(second, 0, /*tag=*/2);
    auto w1 = comm.recv_async(first, 0, /*tag=*/1);
    w2->wait();
    w1->wait();
    CHECK(at::equal(first, at::full({5}, 1.0, at::kDouble)));
    CHECK(at::equal(second, at::full({5}, 2.0, at::kDouble)));
  }
  comm.barrier();
}

TEST_CASE("barrier completes, sync and async", "[mpi][barrier]") {
  auto& comm = test_world();
  comm.barrier();
  auto work = comm.barrier_async();
  work->wait();
  CHECK(work->is_completed());
}

TEST_CASE("all_to_all delivers each rank's piece for every other rank, uneven and empty pieces "
          "included", "[mpi][all_to_all]") {
  auto& comm = test_world();
  const int n = comm.size(), me = comm.rank();
  // rank s sends rank d (s + 2 d) % 3 elements (some pieces empty), valued 1000 s + 10 d + i
  auto count = [](int s, int d) { return int64_t((s + 2 * d) % 3); };
  for (c10::ScalarType dtype : all_dtypes())
    for (bool async : {false, true}) {
      std::vector<int64_t> send_counts, recv_counts;
      std::vector<double> send_values, expected;
      for (int d = 0; d < n; ++d) {
        send_counts.push_back(count(me, d));
        for (int64_t i = 0; i < count(me, d); ++i) send_values.push_back(1000.0 * me + 10 * d + i);
      }
      for (int s = 0; s < n; ++s) {
        recv_counts.push_back(count(s, me));
        for (int64_t i = 0; i < count(s, me); ++i) expected.push_back(1000.0 * s + 10 * me + i);
      }
      at::Tensor in = make_tensor(int64_t(send_values.size()), dtype, /*contiguous=*/true);
      fill(in, send_values);
      // a strided output: the op copies into it
      at::Tensor out = make_tensor(int64_t(expected.size()), dtype, /*contiguous=*/false);
      if (async) {
        auto work = comm.all_to_all_async(in, out, send_counts, recv_counts);
        work->wait();
        CHECK(work->is_completed());
      } else {
        comm.all_to_all(in, out, send_counts, recv_counts);
      }
      INFO(describe(dtype, int64_t(expected.size()), false, async));
      CHECK(mismatch(out, expected) == "");  // (expected rounded to the dtype, as bf16 holds it)
    }
  // wrong counts are refused before anything is sent
  at::Tensor x = at::zeros({4}, at::kFloat);
  CHECK_THROWS_WITH(comm.all_to_all(x, x, {4}, {4}), Catch::Contains("one per rank"));
  std::vector<int64_t> bad(size_t(n), 0);
  bad[0] = 5;
  CHECK_THROWS_WITH(comm.all_to_all(x, x, bad, bad), Catch::Contains("the counts sum to"));
}

TEST_CASE("bad arguments are rejected at issue time on the calling rank", "[mpi][errors]") {
  auto& comm = test_world();
  const int n = comm.size();
  at::Tensor x = at::zeros({10}, at::kFloat);
  CHECK_THROWS_WITH(comm.all_gather(x, at::zeros({10 * n + 1}, at::kFloat)),
                    Catch::Contains("all_gather: output has"));
  CHECK_THROWS_WITH(comm.reduce_scatter(x, at::zeros({11}, at::kFloat)),
                    Catch::Contains("reduce_scatter: output has 11 elements"));
  CHECK_THROWS_WITH(comm.all_reduce(at::zeros({4}, at::kInt)),
                    Catch::Contains("unsupported tensor dtype"));
  CHECK_THROWS_WITH(comm.all_gather(x, at::zeros({10 * n}, at::kDouble)),
                    Catch::Contains("dtype"));
  CHECK_THROWS_WITH(comm.broadcast(x, n), Catch::Contains("outside this communicator"));
  CHECK_THROWS_WITH(comm.send(x, 0, -1), Catch::Contains("tag must be >= 0"));
  // The communicator is still usable afterwards (nothing was enqueued).
  comm.all_reduce(x);
  CHECK(at::equal(x, at::zeros({10}, at::kFloat)));
}
