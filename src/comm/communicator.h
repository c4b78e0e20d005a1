#pragma once
// The Communicator: collectives and point-to-point on at::Tensor, one interface for the MPI
// backend (CPU tensors, mpi_communicator.h) and the NCCL backend (CUDA tensors,
// nccl_communicator.h).
//
// Semantics every backend keeps:
// - dtypes: float32, bfloat16, float16, float64, int64 (table and 16-bit rule in dtype.h).
// - Tensors may be non-contiguous (copied in/out) and may have 0 elements. Shapes are ignored
//   except for element counts: collectives work on the flat row-major elements.
// - Every op has an async form returning a Work. Async ops of one communicator execute in issue
//   order on that communicator's own stream of execution (MPI: one communication thread; NCCL:
//   one cudaStream_t). The sync form is async + wait(), so sync and async ops are ordered alike.
//   Between issue and wait() the op reads its inputs and writes its outputs at any time: do not
//   touch them until wait() returns.
// - Like MPI, every rank of the communicator must issue the same collectives in the same order
//   with the same element counts; ranks with different counts are a bug in the caller.
// - Work::wait() waits at most timeout_s (CommOptions, --comm-timeout-s); then it prints
//   "rank R: <op> of N bytes did not complete within T s; a peer rank probably died or hung"
//   and aborts the whole job (MPI_Abort) with kCommTimeoutExitCode.
// - Every op reports an OpRecord (observer.h) to the observer, if one is set; split() children
//   inherit the observer and the options.
//
// Sizes not divisible by the communicator size follow the padding rule of shard.h:
//   reduce_scatter: input N elements (any N); output shard_numel(N, n) = ceil(N/n) elements.
//     The input is padded with zeros to n*shard; rank r receives the reduction of padded
//     elements [r*shard, (r+1)*shard). Slots past N (only on the last ranks) come out as 0.
//   all_gather: input m elements on every rank; output N elements with ceil(N/n) == m, i.e.
//     any N in ((m-1)*n, m*n]. The output is the concatenation of the inputs in rank order,
//     truncated to N. So all_gather(reduce_scatter(x)) has x's element count again.
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/observer.h"
#include "comm/shard.h"

namespace hlp::comm {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

struct CommOptions {
  double timeout_s = 300.0;  // Work::wait() limit before aborting the job (--comm-timeout-s)
};

// Exit code of a job aborted because an op exceeded the comm timeout.
constexpr int kCommTimeoutExitCode = 124;  // as timeout(1); 75 means "checkpointed, requeue me" (train/checkpoint.h)

// Handle to one issued op.
class Work {
 public:
  Work(OpKind kind, std::shared_ptr<Observer> observer)
      : kind_(kind), observer_(std::move(observer)) {}
  virtual ~Work() = default;
  // Blocks until the op completed; rethrows an error the op raised. Waits at most the comm
  // timeout, then aborts the job (see above). Safe to call more than once.
  // The time the calling thread is blocked here is this library's one measure of exposed
  // communication: it is added to the thread's BlockedTotals and reported to the observer.
  void wait();
  // Non-blocking.
  virtual bool is_completed() = 0;

 protected:
  virtual void wait_until_done() = 0;

 private:
  const OpKind kind_;
  const std::shared_ptr<Observer> observer_;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  explicit Communicator(CommOptions options) : timeout_s_(options.timeout_s) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;  // "mpi", "nccl"
  // Where small bookkeeping tensors for this communicator (a loss, a norm, a stop flag) are
  // best made: the CPU for MPI (no staging), the communicator's GPU for NCCL (which takes
  // nothing else).
  virtual c10::Device scalar_device() const { return c10::Device(c10::kCPU); }

  // Collective over this communicator: ranks passing the same color form one new communicator,
  // ranked by (key, old rank). color < 0 means "not in any group" and returns nullptr.
  // The child inherits the observer and the timeout.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // ---- async forms ----
  // tensor <- op over ranks of tensor (in place).
  virtual WorkPtr all_reduce_async(at::Tensor tensor, ReduceOp op) = 0;
  // output (N elements, ceil(N/n) == input.numel()) <- concat over ranks of input, truncated.
  virtual WorkPtr all_gather_async(at::Tensor input, at::Tensor output) = 0;
  // output (ceil(N/n) elements) <- op over ranks of this rank's slice of the zero-padded input.
  virtual WorkPtr reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) = 0;
  // tensor <- root's tensor.
  virtual WorkPtr broadcast_async(at::Tensor tensor, int root) = 0;
  // Point-to-point. Started in issue order but, unlike collectives, they complete whenever
  // the peer matches them, so two ranks may exchange in both directions without deadlock.
  // Tags must be >= 0; a recv must have the same element count as the matching send.
  virtual WorkPtr send_async(at::Tensor tensor, int dst, int tag) = 0;
  virtual WorkPtr recv_async(at::Tensor tensor, int src, int tag) = 0;
  virtual WorkPtr barrier_async() = 0;
  // output <- the pieces the other ranks send this one (MPI_Alltoallv): input holds
  // send_counts[r] elements for rank r, concatenated in rank order; output receives
  // recv_counts[r] elements from rank r, concatenated in rank order (one count per rank each;
  // every rank's send_counts[me] must equal my recv_counts[it], the caller's bookkeeping, as in
  // MPI). Same dtype both sides; the counts are elements, any may be 0. Its OpRecord's bytes
  // are what this rank sent to the other ranks (the piece it keeps is a local copy).
  virtual WorkPtr all_to_all_async(at::Tensor input, at::Tensor output,
                                   std::vector<int64_t> send_counts,
                                   std::vector<int64_t> recv_counts) = 0;

  // ---- sync forms: async + wait ----
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) {
    run_sync(OpKind::AllReduce, [&] { return all_reduce_async(tensor, op); });
  }
  void all_gather(const at::Tensor& input, const at::Tensor& output) {
    run_sync(OpKind::AllGather, [&] { return all_gather_async(input, output); });
  }
  void reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                      ReduceOp op = ReduceOp::Sum) {
    run_sync(OpKind::ReduceScatter, [&] { return reduce_scatter_async(input, output, op); });
  }
  void broadcast(const at::Tensor& tensor, int root) {
    run_sync(OpKind::Broadcast, [&] { return broadcast_async(tensor, root); });
  }
  void send(const at::Tensor& tensor, int dst, int tag = 0) {
    run_sync(OpKind::Send, [&] { return send_async(tensor, dst, tag); });
  }
  void recv(const at::Tensor& tensor, int src, int tag = 0) {
    run_sync(OpKind::Recv, [&] { return recv_async(tensor, src, tag); });
  }
  void barrier() {
    run_sync(OpKind::Barrier, [&] { return barrier_async(); });
  }
  void all_to_all(const at::Tensor& input, const at::Tensor& output,
                  const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
    run_sync(OpKind::AllToAll,
             [&] { return all_to_all_async(input, output, send_counts, recv_counts); });
  }

  // Allocating conveniences. all_gather: input [*S] -> [n, *S].
  // reduce_scatter: input (N elements) -> 1-D [ceil(N/n)] (this rank's padded shard).
  at::Tensor all_gather(const at::Tensor& input);
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op = ReduceOp::Sum);

  // ---- observer and options ----
  void set_observer(std::shared_ptr<Observer> observer);
  std::shared_ptr<Observer> observer() const;
  double timeout_s() const { return timeout_s_.load(); }
  void set_timeout_s(double timeout_s);  // applies to ops issued afterwards and to children
  CommOptions options() const { return CommOptions{timeout_s()}; }

 protected:
  // Backends call this once per finished op (from whichever thread finished it).
  void report(const OpRecord& record) const;

  // True while a sync form issues its op (backends put it in OpRecord::async = false).
  static bool issuing_sync();

  // A sync form: issues the op (async form), waits, and accounts the whole interval as one
  // blocked wait of `kind` (the MPI backend may run a sync collective inline in issue()).
  void run_sync(OpKind kind, const std::function<WorkPtr()>& issue);

  // Argument checks shared by the backends; throw std::invalid_argument naming the problem.
  void check_all_gather_args(const at::Tensor& input, const at::Tensor& output) const;
  void check_reduce_scatter_args(const at::Tensor& input, const at::Tensor& output) const;
  void check_peer(int peer, const char* what) const;
  // all_to_all: one count per rank, none negative, summing to the tensors' element counts, one
  // dtype; returns the bytes sent to the other ranks.
  int64_t check_all_to_all_args(const at::Tensor& input, const at::Tensor& output,
                                const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts) const;

 private:
  struct SyncScope {
    SyncScope();
    ~SyncScope();
  };
  std::atomic<double> timeout_s_;
  mutable std::mutex observer_mutex_;
  std::shared_ptr<Observer> observer_;
};

// Seconds the calling thread has spent blocked waiting for communication (Work::wait() and the
// sync forms) since it started, split by kind: collectives (all_reduce, all_gather,
// reduce_scatter, broadcast, barrier) and point-to-point (send, recv). The trainer reads the
// difference over a step: collectives are exposed communication, point-to-point waits are a
// pipeline stage waiting for its neighbour (idle time, including the transfer itself).
// all_to_all_s: the part of collective_s spent in all_to_all (expert parallelism's dispatch,
// combine and counts; context parallelism's head re-sharding under its all-to-all schemes).
struct BlockedTotals {
  double collective_s = 0.0;
  double p2p_s = 0.0;
  double all_to_all_s = 0.0;
  int64_t waits = 0;
};
BlockedTotals this_thread_blocked();
// Adds a wait measured elsewhere to this thread's totals: the GPU path (cuda_timing.h) adds the
// seconds its compute stream stood still waiting for a communication stream.
void add_blocked_s(OpKind kind, double seconds);

// CPU seconds used so far by every communication thread of this process (MPI backend: one per
// communicator; updated after each op, so an op still running is not counted yet).
double comm_threads_cpu_s();
// For backends: adds CPU seconds their communication threads used.
void add_comm_thread_cpu_s(double seconds);

// Bytes of a tensor's payload (numel * element size).
int64_t tensor_bytes(const at::Tensor& tensor);

// Prints `message` as one line on stderr and ends the whole job: MPI_Abort(MPI_COMM_WORLD, code)
// when MPI is running, std::_Exit(code) otherwise. For fatal errors on one rank, so that the
// other ranks do not wait for it forever. Never returns.
[[noreturn]] void abort_all(const std::string& message, int code = 1);

// World rank of this process for messages (-1 before MPI is initialised).
int world_rank_for_messages();

}  // namespace hlp::comm
