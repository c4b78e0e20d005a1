#include "comm/mpi_communicator.h"

#include <ATen/ATen.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "comm/dtype.h"
#include "comm/staging.h"

namespace hlp::comm {
namespace {

std::atomic<int> g_world_rank{-1};
std::atomic<bool> g_finalized{false};

// Live communicators, so that finalize() can stop their threads before MPI_Finalize.
std::mutex g_registry_mutex;
std::vector<std::weak_ptr<MpiCommunicator>> g_registry;

void register_comm(const std::shared_ptr<MpiCommunicator>& comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  g_registry.push_back(comm);
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(text, length));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// MPI counts are int: run fn(offset, count) over chunks of at most INT_MAX elements.
template <typename Fn>
void for_each_chunk(int64_t total, Fn fn) {
  if (total == 0) return;
  for (int64_t offset = 0; offset < total; offset += INT_MAX)
    fn(offset, static_cast<int>(std::min<int64_t>(INT_MAX, total - offset)));
}

int checked_count(int64_t count, const char* what) {
  if (count > INT_MAX)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(count) +
                                " elements per rank exceeds the MPI count limit (2^31-1)");
  return static_cast<int>(count);
}

// Byte address of element `offset` of a contiguous tensor.
void* element_ptr(const at::Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * t.element_size();
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

int world_rank_for_messages() { return g_world_rank.load(); }

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void abort_all(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  int world_size = 0;
  if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // One process (a singleton run without mpiexec, or -n 1): no peer to stop. MPICH's
  // MPI_Abort would call exit(), whose static destructors then free communicators inside the
  // aborting library ("Assertion failed in comm_free.c", exit 1): leave at once instead.
  if (world_size > 1) {
    // Give mpiexec's output forwarding a moment: MPI_Abort kills every process at once and
    // Hydra can drop the last line written just before it.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

MPI_Datatype mpi_wire_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return MPI_FLOAT;
    case c10::ScalarType::Double: return MPI_DOUBLE;
    case c10::ScalarType::Long: return MPI_INT64_T;
    case c10::ScalarType::BFloat16: return MPI_UINT16_T;
    case c10::ScalarType::Half: return MPI_UINT16_T;  // moved as bits; reduced in float32
    default: dtype_info(type);  // throws the "unsupported dtype" message
  }
  throw std::logic_error("mpi_wire_type: dtype table and MPI table disagree");
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

MpiCommunicator::MpiCommunicator(MPI_Comm comm, CommOptions options)
    : Communicator(options), comm_(comm) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  owns_comm_ = comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF;
  queue_ = std::make_shared<MpiOpQueue>([this](const OpRecord& record) { report(record); });
}

MpiCommunicator::~MpiCommunicator() { shutdown(); }

void MpiCommunicator::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  queue_->stop(timeout_s());
  if (owns_comm_ && mpi_running()) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiCommunicator> init_mpi_world(int& argc, char**& argv, CommOptions options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check_mpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit([] { finalize(); });
  } else {
    MPI_Query_thread(&provided);
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  g_world_rank = world_rank;
  if (provided < MPI_THREAD_MULTIPLE)
    throw user_error("the MPI library provides only ", thread_level_name(provided),
                     "; HLP runs one communication thread per communicator and needs "
                     "MPI_THREAD_MULTIPLE (use an MPI built with thread support, e.g. MPICH)");
  if (!(options.timeout_s > 0))
    throw user_error("--comm-timeout-s must be > 0 (got ", options.timeout_s, ")");
  MPI_Comm world;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  auto comm = std::make_shared<MpiCommunicator>(world, options);
  register_comm(comm);
  return comm;
}

void finalize() {
  if (!mpi_running()) return;
  std::vector<std::shared_ptr<MpiCommunicator>> live;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    for (auto& weak : g_registry)
      if (auto comm = weak.lock()) live.push_back(comm);
    g_registry.clear();
  }
  for (auto& comm : live) comm->shutdown();
  live.clear();
  g_finalized = true;
  MPI_Finalize();
}

// ---------------------------------------------------------------------------------------------
// Queue plumbing

WorkPtr MpiCommunicator::enqueue(OpKind kind, int64_t bytes, int peer,
                                 std::function<void()> run, bool reported) {
  if (shut_down_) throw std::logic_error("MPI communicator used after shutdown()/finalize()");
  auto work = std::make_shared<ThreadWork>(kind, bytes, timeout_s(), observer());
  MpiTask task;
  task.work = work;
  task.record = OpRecord{kind, bytes, 0.0, 0.0, size_, peer, /*async=*/!issuing_sync()};
  task.run = std::move(run);
  task.reported = reported;
  if (!task.record.async && queue_->try_run_inline(task, timeout_s())) return work;
  queue_->push(std::move(task));
  return work;
}

WorkPtr MpiCommunicator::enqueue_p2p(OpKind kind, int64_t bytes, int peer,
                                     std::function<MPI_Request()> post,
                                     std::function<void(const MPI_Status&)> finish) {
  if (shut_down_) throw std::logic_error("MPI communicator used after shutdown()/finalize()");
  auto work = std::make_shared<ThreadWork>(kind, bytes, timeout_s(), observer());
  MpiTask task;
  task.work = work;
  task.record = OpRecord{kind, bytes, 0.0, 0.0, size_, peer, /*async=*/!issuing_sync()};
  task.post = std::move(post);
  task.finish = std::move(finish);
  // The queue polls this op fast while a caller waits on it (a weak reference: a Work may
  // outlive its communicator).
  work->set_block_hook([queue = std::weak_ptr<MpiOpQueue>(queue_)](bool blocked) {
    if (auto q = queue.lock()) q->caller_blocked(blocked);
  });
  queue_->push(std::move(task));
  return work;
}

void MpiCommunicator::check_cpu(const at::Tensor& tensor, const char* what) const {
  if (!tensor.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
  // CUDA tensors are staged through pinned host memory (staging.h).
  if (!tensor.device().is_cpu() && !tensor.device().is_cuda())
    throw std::invalid_argument(std::string(what) + ": the MPI backend takes CPU or CUDA "
                                "tensors (got " + tensor.device().str() + ")");
  dtype_info(tensor.scalar_type());
}

// ---------------------------------------------------------------------------------------------
// Ops. Each lambda runs on the communication thread.

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  auto new_comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  MPI_Comm comm = comm_;
  // A collective on comm_, so it goes through the queue like every other collective
  // (not reported to the observer: it is setup, not training traffic).
  enqueue(OpKind::Barrier, 0, -1, [comm, color, key, new_comm] {
    check_mpi(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, new_comm.get()),
              "MPI_Comm_split");
  }, /*reported=*/false)->wait();
  if (*new_comm == MPI_COMM_NULL) return nullptr;
  auto child = std::make_shared<MpiCommunicator>(*new_comm, options());
  child->set_observer(observer());
  register_comm(child);
  return child;
}

WorkPtr MpiCommunicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  check_cpu(tensor, "all_reduce");
  const int n = size_;
  MPI_Comm comm = comm_;
  return enqueue(OpKind::AllReduce, tensor_bytes(tensor), -1, [tensor, op, n, comm] {
    at::Tensor buffer = to_reduce_buffer(tensor);  // contiguous, reduce dtype
    MPI_Datatype type = mpi_wire_type(buffer.scalar_type());
    for_each_chunk(buffer.numel(), [&](int64_t offset, int count) {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, element_ptr(buffer, offset), count, type, mpi_op(op),
                              comm),
                "MPI_Allreduce");
    });
    if (op == ReduceOp::Avg) divide_for_avg(buffer, n);
    copy_back(tensor, buffer);
  });
}

WorkPtr MpiCommunicator::all_gather_async(at::Tensor input, at::Tensor output) {
  check_cpu(input, "all_gather");
  check_cpu(output, "all_gather");
  check_all_gather_args(input, output);
  const int count = checked_count(input.numel(), "all_gather");
  const int n = size_;
  MPI_Comm comm = comm_;
  return enqueue(OpKind::AllGather, tensor_bytes(input), -1, [input, output, count, n, comm] {
    if (count == 0) return;
    at::Tensor send = contiguous_buffer(input);
    const bool direct =
        output.device().is_cpu() && output.is_contiguous() && output.numel() == int64_t(count) * n;
    at::Tensor gathered =
        direct ? output : at::empty({int64_t(count) * n}, host_options(output.options()));
    MPI_Datatype type = mpi_wire_type(input.scalar_type());
    check_mpi(MPI_Allgather(send.data_ptr(), count, type, gathered.data_ptr(), count, type, comm),
              "MPI_Allgather");
    if (!direct) output.copy_(gathered.view({-1}).narrow(0, 0, output.numel()).view(output.sizes()));
  });
}

WorkPtr MpiCommunicator::reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) {
  check_cpu(input, "reduce_scatter");
  check_cpu(output, "reduce_scatter");
  check_reduce_scatter_args(input, output);
  const int shard = checked_count(output.numel(), "reduce_scatter");
  const int n = size_;
  MPI_Comm comm = comm_;
  return enqueue(OpKind::ReduceScatter, tensor_bytes(input), -1,
                 [input, output, op, shard, n, comm] {
    if (shard == 0) return;
    at::Tensor padded = padded_reduce_input(input, n);  // [n * shard], reduce dtype
    at::Tensor result = to_reduce_buffer(output);       // [shard] (output itself if it can be)
    MPI_Datatype type = mpi_wire_type(padded.scalar_type());
    check_mpi(MPI_Reduce_scatter_block(padded.data_ptr(), result.data_ptr(), shard, type,
                                       mpi_op(op), comm),
              "MPI_Reduce_scatter_block");
    if (op == ReduceOp::Avg) divide_for_avg(result, n);
    copy_back(output, result);
  });
}

WorkPtr MpiCommunicator::broadcast_async(at::Tensor tensor, int root) {
  check_cpu(tensor, "broadcast");
  check_peer(root, "broadcast root");
  MPI_Comm comm = comm_;
  return enqueue(OpKind::Broadcast, tensor_bytes(tensor), -1, [tensor, root, comm] {
    at::Tensor buffer = contiguous_buffer(tensor);
    MPI_Datatype type = mpi_wire_type(tensor.scalar_type());
    for_each_chunk(buffer.numel(), [&](int64_t offset, int count) {
      check_mpi(MPI_Bcast(element_ptr(buffer, offset), count, type, root, comm), "MPI_Bcast");
    });
    copy_back(tensor, buffer);
  });
}

WorkPtr MpiCommunicator::send_async(at::Tensor tensor, int dst, int tag) {
  check_cpu(tensor, "send");
  check_peer(dst, "send");
  if (tag < 0) throw std::invalid_argument("send: tag must be >= 0 (got " + std::to_string(tag) + ")");
  const int count = checked_count(tensor.numel(), "send");
  MPI_Comm comm = comm_;
  auto buffer = std::make_shared<at::Tensor>();
  return enqueue_p2p(
      OpKind::Send, tensor_bytes(tensor), dst,
      [tensor, buffer, count, dst, tag, comm] {
        *buffer = contiguous_buffer(tensor);  // kept alive until the send completed
        MPI_Request request;
        static char empty_payload = 0;
        void* data = count ? buffer->data_ptr() : &empty_payload;
        check_mpi(MPI_Isend(data, count, mpi_wire_type(tensor.scalar_type()), dst, tag, comm,
                            &request),
                  "MPI_Isend");
        return request;
      },
      [buffer](const MPI_Status&) { buffer->reset(); });
}

WorkPtr MpiCommunicator::recv_async(at::Tensor tensor, int src, int tag) {
  check_cpu(tensor, "recv");
  check_peer(src, "recv");
  if (tag < 0) throw std::invalid_argument("recv: tag must be >= 0 (got " + std::to_string(tag) + ")");
  const int count = checked_count(tensor.numel(), "recv");
  MPI_Comm comm = comm_;
  auto buffer = std::make_shared<at::Tensor>();
  return enqueue_p2p(
      OpKind::Recv, tensor_bytes(tensor), src,
      [tensor, buffer, count, src, tag, comm] {
        *buffer = host_output_buffer(tensor);
        MPI_Request request;
        static char empty_payload = 0;
        void* data = count ? buffer->data_ptr() : &empty_payload;
        check_mpi(MPI_Irecv(data, count, mpi_wire_type(tensor.scalar_type()), src, tag, comm,
                            &request),
                  "MPI_Irecv");
        return request;
      },
      [tensor, buffer, count, src, tag](const MPI_Status& status) {
        int received = 0;
        MPI_Get_count(&status, mpi_wire_type(tensor.scalar_type()), &received);
        if (received != count)
          throw std::runtime_error("recv from rank " + std::to_string(src) + " tag " +
                                   std::to_string(tag) + ": expected " + std::to_string(count) +
                                   " elements, got " + std::to_string(received));
        copy_back(tensor, *buffer);
        buffer->reset();
      });
}

WorkPtr MpiCommunicator::barrier_async() {
  MPI_Comm comm = comm_;
  return enqueue(OpKind::Barrier, 0, -1, [comm] { check_mpi(MPI_Barrier(comm), "MPI_Barrier"); });
}

WorkPtr MpiCommunicator::all_to_all_async(at::Tensor input, at::Tensor output,
                                          std::vector<int64_t> send_counts,
                                          std::vector<int64_t> recv_counts) {
  check_cpu(input, "all_to_all");
  check_cpu(output, "all_to_all");
  const int64_t bytes = check_all_to_all_args(input, output, send_counts, recv_counts);
  // MPI_Alltoallv takes int counts and displacements: each must fit, the totals included
  checked_count(input.numel(), "all_to_all");
  checked_count(output.numel(), "all_to_all");
  MPI_Comm comm = comm_;
  return enqueue(OpKind::AllToAll, bytes, -1, [input, output, send_counts, recv_counts, comm] {
    const size_t n = send_counts.size();
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    int so = 0, ro = 0;
    for (size_t r = 0; r < n; ++r) {
      sc[r] = int(send_counts[r]);
      sd[r] = so;
      so += sc[r];
      rc[r] = int(recv_counts[r]);
      rd[r] = ro;
      ro += rc[r];
    }
    at::Tensor send = contiguous_buffer(input);
    at::Tensor recv = host_output_buffer(output);
    static char empty_payload = 0;  // MPI wants a valid address even for 0 elements
    void* sp = send.numel() ? send.data_ptr() : &empty_payload;
    void* rp = recv.numel() ? recv.data_ptr() : &empty_payload;
    MPI_Datatype type = mpi_wire_type(input.scalar_type());
    check_mpi(MPI_Alltoallv(sp, sc.data(), sd.data(), type, rp, rc.data(), rd.data(), type, comm),
              "MPI_Alltoallv");
    copy_back(output, recv);
  });
}

}  // namespace hlp::comm
