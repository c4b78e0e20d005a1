#include "comm/communicator.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "comm/dtype.h"
#include "common/clock.h"

namespace hlp::comm {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::Barrier: return "barrier";
    case OpKind::AllToAll: return "all_to_all";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "unknown";
}

int64_t tensor_bytes(const at::Tensor& tensor) {
  return tensor.numel() * dtype_info(tensor.scalar_type()).element_bytes;
}

namespace {
thread_local bool t_issuing_sync = false;
thread_local bool t_waiting_sync = false;  // inside run_sync: it accounts the wait itself
thread_local BlockedTotals t_blocked;
std::atomic<int64_t> g_comm_thread_cpu_ns{0};

bool is_point_to_point(OpKind kind) { return kind == OpKind::Send || kind == OpKind::Recv; }

void add_blocked(OpKind kind, double seconds) {
  (is_point_to_point(kind) ? t_blocked.p2p_s : t_blocked.collective_s) += seconds;
  if (kind == OpKind::AllToAll) t_blocked.all_to_all_s += seconds;
  ++t_blocked.waits;
}

void note_blocked(OpKind kind, double start_s, double end_s, Observer* observer) {
  add_blocked(kind, end_s - start_s);
  if (observer) observer->on_comm_wait(WaitRecord{kind, start_s, end_s});
}
}  // namespace

BlockedTotals this_thread_blocked() { return t_blocked; }

void add_blocked_s(OpKind kind, double seconds) { add_blocked(kind, seconds); }

double comm_threads_cpu_s() { return double(g_comm_thread_cpu_ns.load()) * 1e-9; }
void add_comm_thread_cpu_s(double seconds) {
  g_comm_thread_cpu_ns.fetch_add(int64_t(seconds * 1e9));
}

void Work::wait() {
  if (t_waiting_sync) {  // run_sync times issue + wait as one interval
    wait_until_done();
    return;
  }
  const double t0 = now_s();
  wait_until_done();
  note_blocked(kind_, t0, now_s(), observer_.get());
}

bool Communicator::issuing_sync() { return t_issuing_sync; }
Communicator::SyncScope::SyncScope() { t_issuing_sync = true; }
Communicator::SyncScope::~SyncScope() { t_issuing_sync = false; }

void Communicator::run_sync(OpKind kind, const std::function<WorkPtr()>& issue) {
  const double t0 = now_s();
  WorkPtr work;
  {
    SyncScope scope;
    work = issue();
  }
  t_waiting_sync = true;
  try {
    work->wait();
  } catch (...) {
    t_waiting_sync = false;
    throw;
  }
  t_waiting_sync = false;
  note_blocked(kind, t0, now_s(), observer().get());
}

at::Tensor Communicator::all_gather(const at::Tensor& input) {
  std::vector<int64_t> sizes{size()};
  sizes.insert(sizes.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor output = at::empty(sizes, input.options());  // [n, *S]
  all_gather(input, output);
  return output;
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& input, ReduceOp op) {
  at::Tensor output = at::empty({shard_numel(input.numel(), size())}, input.options());
  reduce_scatter(input, output, op);
  return output;
}

void Communicator::set_observer(std::shared_ptr<Observer> observer) {
  std::lock_guard<std::mutex> lock(observer_mutex_);
  observer_ = std::move(observer);
}

std::shared_ptr<Observer> Communicator::observer() const {
  std::lock_guard<std::mutex> lock(observer_mutex_);
  return observer_;
}

void Communicator::set_timeout_s(double timeout_s) {
  if (!(timeout_s > 0))
    throw std::invalid_argument("comm timeout must be > 0 s (got " + std::to_string(timeout_s) +
                                ")");
  timeout_s_.store(timeout_s);
}

void Communicator::report(const OpRecord& record) const {
  std::shared_ptr<Observer> current = observer();
  if (current) current->on_comm_op(record);
}

void Communicator::check_all_gather_args(const at::Tensor& input,
                                         const at::Tensor& output) const {
  dtype_info(input.scalar_type());
  if (output.scalar_type() != input.scalar_type())
    throw std::invalid_argument(std::string("all_gather: output dtype ") +
                                c10::toString(output.scalar_type()) + " differs from input " +
                                c10::toString(input.scalar_type()));
  const int64_t m = input.numel();
  const int64_t n_out = output.numel();
  if (shard_numel(n_out, size()) != m)
    throw std::invalid_argument(
        "all_gather: output has " + std::to_string(n_out) + " elements but input has " +
        std::to_string(m) + " on " + std::to_string(size()) + " ranks; output must have N " +
        "elements with ceil(N/" + std::to_string(size()) + ") == " + std::to_string(m) +
        " (e.g. " + std::to_string(m * size()) + ")");
}

void Communicator::check_reduce_scatter_args(const at::Tensor& input,
                                             const at::Tensor& output) const {
  dtype_info(input.scalar_type());
  if (output.scalar_type() != input.scalar_type())
    throw std::invalid_argument(std::string("reduce_scatter: output dtype ") +
                                c10::toString(output.scalar_type()) + " differs from input " +
                                c10::toString(input.scalar_type()));
  const int64_t shard = shard_numel(input.numel(), size());
  if (output.numel() != shard)
    throw std::invalid_argument("reduce_scatter: output has " + std::to_string(output.numel()) +
                                " elements; for an input of " + std::to_string(input.numel()) +
                                " on " + std::to_string(size()) + " ranks it must have ceil(" +
                                std::to_string(input.numel()) + "/" + std::to_string(size()) +
                                ") = " + std::to_string(shard));
}

int64_t Communicator::check_all_to_all_args(const at::Tensor& input, const at::Tensor& output,
                                            const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& recv_counts) const {
  dtype_info(input.scalar_type());
  if (output.scalar_type() != input.scalar_type())
    throw std::invalid_argument(std::string("all_to_all: output dtype ") +
                                c10::toString(output.scalar_type()) + " differs from input " +
                                c10::toString(input.scalar_type()));
  auto sum = [&](const std::vector<int64_t>& counts, const char* which) {
    if (int64_t(counts.size()) != size())
      throw std::invalid_argument(std::string("all_to_all: ") + which + " has " +
                                  std::to_string(counts.size()) + " entries on " +
                                  std::to_string(size()) + " ranks; give one per rank");
    int64_t total = 0;
    for (int64_t c : counts) {
      if (c < 0) throw std::invalid_argument(std::string("all_to_all: negative ") + which);
      total += c;
    }
    return total;
  };
  if (sum(send_counts, "send_counts") != input.numel() ||
      sum(recv_counts, "recv_counts") != output.numel())
    throw std::invalid_argument("all_to_all: the counts sum to " +
                                std::to_string(sum(send_counts, "send_counts")) + " sent and " +
                                std::to_string(sum(recv_counts, "recv_counts")) +
                                " received elements, the tensors hold " +
                                std::to_string(input.numel()) + " and " +
                                std::to_string(output.numel()));
  return (input.numel() - send_counts[size_t(rank())]) *
         dtype_info(input.scalar_type()).element_bytes;
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size())
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(peer) +
                                " is outside this communicator of size " +
                                std::to_string(size()));
}

}  // namespace hlp::comm
