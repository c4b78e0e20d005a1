#include "comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/clock.h"
#include "comm/cuda_timing.h"
#include "comm/dtype.h"
#include "comm/thread_work.h"
#include "common/error.h"

namespace hlp::comm {
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(rc));
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(rc));
}

ncclDataType_t nccl_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return ncclFloat32;
    case c10::ScalarType::Double: return ncclFloat64;
    case c10::ScalarType::Long: return ncclInt64;
    case c10::ScalarType::BFloat16: return ncclBfloat16;
    case c10::ScalarType::Half: return ncclFloat16;
    default: dtype_info(type);  // throws "unsupported dtype"
  }
  throw std::logic_error("nccl_type: dtype table and NCCL table disagree");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// A Work completed when its event fires on the communicator's stream. wait() does not block
// the host: the compute stream waits for the event (cuda_timing.h), then the copy-back of
// strided/padded outputs is enqueued on the compute stream behind that wait. The tensors the
// op used are released then: they were allocated on the compute stream, so the caching
// allocator hands their blocks only to later compute-stream work, which runs after the wait.
class EventWork : public Work {
 public:
  EventWork(OpRecord record, double timeout_s, CudaEventPtr done, std::function<void()> finish,
            std::function<void(const OpRecord&)> report, std::shared_ptr<Observer> observer)
      : Work(record.kind, std::move(observer)), record_(record), timeout_s_(timeout_s),
        done_(std::move(done)), finish_(std::move(finish)), report_(std::move(report)) {}

  bool is_completed() override { return done_->completed(); }

 protected:
  void wait_until_done() override {
    if (settled_) return;
    device_wait(done_, record_.kind, record_.bytes, timeout_s_);
    settle();
  }

 private:
  // Copy-back and report, once, on the thread that waits.
  void settle() {
    settled_ = true;
    if (finish_) finish_();
    finish_ = nullptr;  // drop the tensors the op held
    // Host time at which the wait was issued (the op may still be running on the device; the
    // compute stream's stall is measured by cuda_timing.h).
    record_.end_s = now_s();
    if (report_) report_(record_);
  }

  OpRecord record_;
  double timeout_s_;
  CudaEventPtr done_;
  std::function<void()> finish_;
  std::function<void(const OpRecord&)> report_;
  bool settled_ = false;
};

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;
  // Point-to-point lanes (made on the first send / recv, see p2p_lane()): one communicator
  // and stream for traffic toward higher ranks, one toward lower ranks.
  std::unique_ptr<Impl> toward_higher, toward_lower;

  ~Impl() {
    toward_higher.reset();
    toward_lower.reset();
    cudaSetDevice(device);
    if (stream) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (comm) ncclCommDestroy(comm);
  }

  void set_device() const { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }

  // Makes the NCCL stream wait for work already queued on the legacy default stream.
  void wait_for_default_stream() const {
    cudaEvent_t ready;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(ready, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);  // released once the wait has been satisfied
  }

  CudaEventPtr record_done() const {
    auto done = std::make_shared<CudaEvent>();
    done->record_on(stream);
    return done;
  }

  static std::unique_ptr<Impl> from_comm(ncclComm_t comm, int device) {
    auto impl = std::make_unique<Impl>();
    impl->comm = comm;
    impl->device = device;
    impl->set_device();
    check_nccl(ncclCommUserRank(comm, &impl->rank), "ncclCommUserRank");
    check_nccl(ncclCommCount(comm, &impl->size), "ncclCommCount");
    check_cuda(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking),
               "cudaStreamCreate");
    return impl;
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, CommOptions options)
    : Communicator(options), impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;  // Impl's destructor frees streams and comms

// NCCL's send blocks its stream until the peer has posted the matching receive. With sends
// and receives of both directions on one stream, two ranks that each send before they receive
// (a pipeline's 1F1B steady state: activations forward, gradients backward) would wait for
// each other forever. So each direction gets its own communicator and stream: on the "toward
// higher ranks" lane data only moves up, on the other only down; neither lane can form a cycle.
// Made on the first point-to-point op: ncclCommSplit is collective over this communicator, and
// every rank of a communicator used for point-to-point (the pipeline axis) reaches its first
// send or receive at the start of the first step, blocking nothing the others wait for.
NcclCommunicator::Impl& NcclCommunicator::p2p_lane(int peer, bool receiving) {
  if (!impl_->toward_higher) {
    impl_->set_device();
    for (auto* lane : {&impl_->toward_higher, &impl_->toward_lower}) {
      ncclComm_t child = nullptr;
      check_nccl(ncclCommSplit(impl_->comm, 0, impl_->rank, &child, nullptr),
                 "ncclCommSplit (point-to-point lane)");
      *lane = Impl::from_comm(child, impl_->device);
    }
  }
  // A send to a higher rank and a receive from a lower one both move data up.
  const bool upward = receiving ? peer < impl_->rank : peer > impl_->rank;
  return upward ? *impl_->toward_higher : *impl_->toward_lower;
}

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(MpiCommunicator& bootstrap,
                                                           int device, CommOptions options) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  // The id is opaque bytes: broadcast it as a uint8 tensor over the MPI communicator.
  at::Tensor id_bytes = at::empty({static_cast<int64_t>(sizeof(id))}, at::kByte);
  std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
  at::Tensor id_wire = id_bytes.to(at::kLong);  // uint8 is not in the dtype table
  bootstrap.broadcast(id_wire, 0);
  id_bytes = id_wire.to(at::kByte);
  std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
  // NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): find that first and say so.
  // GPUs are compared by UUID (with per-rank CUDA_VISIBLE_DEVICES every index is 0).
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  at::Tensor uuid = at::empty({2}, at::kLong);
  std::memcpy(uuid.data_ptr(), prop.uuid.bytes, 16);
  at::Tensor uuids = bootstrap.all_gather(uuid);  // [n, 2]
  for (int r = 0; r < bootstrap.size(); ++r)
    if (r != bootstrap.rank() && at::equal(uuids[r], uuid))
      throw user_error("NCCL backend: ranks ", std::min(r, bootstrap.rank()), " and ",
                       std::max(r, bootstrap.rank()), " compute on the same GPU (",
                       prop.name, "), and NCCL refuses two ranks on one GPU; launch one rank "
                       "per GPU, or use the MPI backend (--comm mpi), which stages CUDA tensors "
                       "through host memory");
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank");
  auto impl = Impl::from_comm(comm, device);
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl), options));
}

c10::Device NcclCommunicator::scalar_device() const {
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(impl_->device));
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  impl_->set_device();
  ncclComm_t child = nullptr;
  check_nccl(ncclCommSplit(impl_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child,
                           nullptr),
             "ncclCommSplit");
  if (child == nullptr) return nullptr;
  auto impl = Impl::from_comm(child, impl_->device);
  std::shared_ptr<NcclCommunicator> result(new NcclCommunicator(std::move(impl), options()));
  result->set_observer(observer());
  return result;
}

namespace {

void check_cuda_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
  if (!t.device().is_cuda())
    throw std::invalid_argument(std::string(what) + ": the NCCL backend takes CUDA tensors (got " +
                                t.device().str() + "); use the MPI backend for CPU tensors");
  dtype_info(t.scalar_type());
}

}  // namespace

// Shared tail of every op: enqueue on the stream (after the default stream's pending work),
// record completion, hand back an EventWork that copies back and reports on wait().
WorkPtr NcclCommunicator::issue(OpKind kind, int64_t bytes, int peer,
                                const std::function<void()>& enqueue,
                                std::function<void()> finish, Impl* lane) {
  Impl& on = lane ? *lane : *impl_;
  on.set_device();
  OpRecord record{kind, bytes, now_s(), 0.0, impl_->size, peer, !issuing_sync()};
  on.wait_for_default_stream();
  enqueue();
  CudaEventPtr done = on.record_done();
  return std::make_shared<EventWork>(record, timeout_s(), done, std::move(finish),
                                     [this](const OpRecord& r) { report(r); }, observer());
}

WorkPtr NcclCommunicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  check_cuda_tensor(tensor, "all_reduce");
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  // Every finish lambda holds the tensors the stream uses, so they outlive the op.
  std::function<void()> finish = [tensor, buffer] {
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  };
  return issue(OpKind::AllReduce, tensor_bytes(tensor), -1,
               [&] {
                 check_nccl(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                          nccl_type(buffer.scalar_type()), nccl_op(op),
                                          impl_->comm, impl_->stream),
                            "ncclAllReduce");
               },
               finish);
}

WorkPtr NcclCommunicator::all_gather_async(at::Tensor input, at::Tensor output) {
  check_cuda_tensor(input, "all_gather");
  check_cuda_tensor(output, "all_gather");
  check_all_gather_args(input, output);
  const int64_t m = input.numel();
  at::Tensor send = input.is_contiguous() ? input : input.contiguous();
  const bool direct = output.is_contiguous() && output.numel() == m * impl_->size;
  at::Tensor gathered = direct ? output : at::empty({m * impl_->size}, output.options());
  std::function<void()> finish = [output, gathered, send, direct] {
    if (!direct) output.copy_(gathered.narrow(0, 0, output.numel()).view(output.sizes()));
  };
  return issue(OpKind::AllGather, tensor_bytes(input), -1,
               [&] {
                 check_nccl(ncclAllGather(send.data_ptr(), gathered.data_ptr(), m,
                                          nccl_type(input.scalar_type()), impl_->comm,
                                          impl_->stream),
                            "ncclAllGather");
               },
               finish);
}

WorkPtr NcclCommunicator::reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) {
  check_cuda_tensor(input, "reduce_scatter");
  check_cuda_tensor(output, "reduce_scatter");
  check_reduce_scatter_args(input, output);
  const int64_t numel = input.numel();
  const int64_t shard = output.numel();
  const int64_t padded_count = shard * impl_->size;
  at::Tensor padded;
  if (padded_count == numel && input.is_contiguous()) {
    padded = input.view({numel});
  } else {
    padded = at::zeros({padded_count}, input.options());
    padded.narrow(0, 0, numel).view(input.sizes()).copy_(input);
  }
  at::Tensor result = output.is_contiguous() ? output : at::empty({shard}, output.options());
  std::function<void()> finish = [output, result, padded] {
    if (!result.is_same(output)) output.copy_(result.view(output.sizes()));
  };
  return issue(OpKind::ReduceScatter, tensor_bytes(input), -1,
               [&] {
                 check_nccl(ncclReduceScatter(padded.data_ptr(), result.data_ptr(), shard,
                                              nccl_type(input.scalar_type()), nccl_op(op),
                                              impl_->comm, impl_->stream),
                            "ncclReduceScatter");
               },
               finish);
}

WorkPtr NcclCommunicator::broadcast_async(at::Tensor tensor, int root) {
  check_cuda_tensor(tensor, "broadcast");
  check_peer(root, "broadcast root");
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  std::function<void()> finish = [tensor, buffer] {
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  };
  return issue(OpKind::Broadcast, tensor_bytes(tensor), -1,
               [&] {
                 check_nccl(ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                          nccl_type(tensor.scalar_type()), root, impl_->comm,
                                          impl_->stream),
                            "ncclBroadcast");
               },
               finish);
}

WorkPtr NcclCommunicator::send_async(at::Tensor tensor, int dst, int tag) {
  check_cuda_tensor(tensor, "send");
  check_peer(dst, "send");
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  // NCCL has no tags: messages between a pair match in issue order.
  Impl& lane = p2p_lane(dst, /*receiving=*/false);
  return issue(OpKind::Send, tensor_bytes(tensor), dst,
               [&] {
                 check_nccl(ncclSend(buffer.data_ptr(), buffer.numel(),
                                     nccl_type(tensor.scalar_type()), dst, lane.comm,
                                     lane.stream),
                            "ncclSend");
               },
               [buffer] {}, &lane);
}

WorkPtr NcclCommunicator::recv_async(at::Tensor tensor, int src, int tag) {
  check_cuda_tensor(tensor, "recv");
  check_peer(src, "recv");
  at::Tensor buffer = tensor.is_contiguous() ? tensor : at::empty(tensor.sizes(), tensor.options());
  std::function<void()> finish = [tensor, buffer] {
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  };
  Impl& lane = p2p_lane(src, /*receiving=*/true);
  return issue(OpKind::Recv, tensor_bytes(tensor), src,
               [&] {
                 check_nccl(ncclRecv(buffer.data_ptr(), buffer.numel(),
                                     nccl_type(tensor.scalar_type()), src, lane.comm,
                                     lane.stream),
                            "ncclRecv");
               },
               finish, &lane);
}

WorkPtr NcclCommunicator::barrier_async() {
  // NCCL has no barrier: a one-element all-reduce on the stream serves as one.
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(
                                        at::Device(at::kCUDA, impl_->device)));
  return issue(OpKind::Barrier, 0, -1,
               [&] {
                 check_nccl(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32,
                                          ncclSum, impl_->comm, impl_->stream),
                            "ncclAllReduce (barrier)");
               },
               [token] {});
}

WorkPtr NcclCommunicator::all_to_all_async(at::Tensor input, at::Tensor output,
                                           std::vector<int64_t> send_counts,
                                           std::vector<int64_t> recv_counts) {
  check_cuda_tensor(input, "all_to_all");
  check_cuda_tensor(output, "all_to_all");
  const int64_t bytes = check_all_to_all_args(input, output, send_counts, recv_counts);
  at::Tensor send = input.is_contiguous() ? input : input.contiguous();
  at::Tensor recv = output.is_contiguous() ? output : at::empty({output.numel()}, output.options());
  std::function<void()> finish = [output, recv, send] {
    if (!recv.is_same(output)) output.copy_(recv.view(output.sizes()));
  };
  // NCCL has no all-to-all-v: one grouped send and receive per peer (itself included) on the
  // collective stream, so it is ordered with the other collectives like one.
  const auto type = nccl_type(input.scalar_type());
  const size_t elem = size_t(input.element_size());
  return issue(OpKind::AllToAll, bytes, -1,
               [&] {
                 check_nccl(ncclGroupStart(), "ncclGroupStart");
                 int64_t so = 0, ro = 0;
                 for (int r = 0; r < impl_->size; ++r) {
                   const int64_t sc = send_counts[size_t(r)], rc = recv_counts[size_t(r)];
                   if (sc > 0)
                     check_nccl(ncclSend(static_cast<char*>(send.data_ptr()) + so * elem, sc, type,
                                         r, impl_->comm, impl_->stream),
                                "ncclSend (all_to_all)");
                   if (rc > 0)
                     check_nccl(ncclRecv(static_cast<char*>(recv.data_ptr()) + ro * elem, rc, type,
                                         r, impl_->comm, impl_->stream),
                                "ncclRecv (all_to_all)");
                   so += sc;
                   ro += rc;
                 }
                 check_nccl(ncclGroupEnd(), "ncclGroupEnd");
               },
               finish);
}

int cuda_device_count(std::string* error) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (error) *error = cudaGetErrorString(rc);
    return 0;
  }
  return count;
}

std::string nccl_version_string() {
  int version = 0;
  ncclGetVersion(&version);
  std::ostringstream os;
  os << version / 10000 << "." << (version % 10000) / 100 << "." << version % 100;
  return os.str();
}

std::string cuda_runtime_version_string() {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  std::ostringstream os;
  os << version / 1000 << "." << (version % 1000) / 10;
  return os.str();
}

}  // namespace hlp::comm
