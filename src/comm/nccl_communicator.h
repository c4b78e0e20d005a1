#pragma once
// NCCL backend: CUDA tensors, bootstrapped over an MPI communicator. Built only when the CUDA
// path is on (HLP_HAVE_CUDA; target hlp_comm_nccl). LibTorch may be CPU-only at build time:
// this backend uses the CUDA runtime API directly, never c10/cuda.
//
// - Creation: rank 0 of the bootstrap communicator makes an ncclUniqueId, MPI_Bcast sends it to
//   the others, every rank calls ncclCommInitRank on its device.
// - split(): ncclCommSplit (NCCL >= 2.18).
// - Each communicator owns one cudaStream_t: ops run on it in issue order. At issue, an event
//   recorded on the legacy default stream (where LibTorch's work goes unless the caller picked
//   another stream) makes the NCCL stream wait for the tensors to be ready; a second event
//   marks completion. Work::wait() does not block the host: the default (compute) stream waits
//   for that event (cudaStreamWaitEvent), the copy-back of strided/padded outputs is enqueued
//   behind it, and a watchdog thread aborts the job if the event has not fired within
//   timeout_s (communicator.h). cuda_timing.h measures how long the compute stream waited.
// - Two ranks on one GPU: create() finds it (GPU UUIDs over the bootstrap communicator) and
//   throws hlp::UserError saying so, since NCCL refuses that configuration.
// - dtypes map to NCCL types natively (bfloat16 included: NCCL reduces bf16 itself, rounding
//   per step, unlike the MPI backend's float32 reduction). Avg = ncclAvg.
// - Point-to-point: NCCL's send occupies its stream until the peer receives, so sends and
//   receives run on two extra lanes (communicator + stream each, made on the first p2p op):
//   one carrying data toward higher ranks, one toward lower ranks. Data moves one way on each
//   lane, so exchanges in both directions (pipeline 1F1B) cannot deadlock.
// - Observer times are host times: start at issue, end when wait() was called (the device may
//   still be running the op; exposed time on the device comes from cuda_timing.h).
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace hlp::comm {

class NcclCommunicator : public Communicator {
 public:
  // Collective over bootstrap. device: the CUDA device this rank uses.
  static std::shared_ptr<NcclCommunicator> create(MpiCommunicator& bootstrap, int device,
                                                  CommOptions options);
  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  const char* backend_name() const override { return "nccl"; }
  c10::Device scalar_device() const override;
  std::shared_ptr<Communicator> split(int color, int key) override;

  WorkPtr all_reduce_async(at::Tensor tensor, ReduceOp op) override;
  WorkPtr all_gather_async(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter_async(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr broadcast_async(at::Tensor tensor, int root) override;
  WorkPtr send_async(at::Tensor tensor, int dst, int tag) override;
  WorkPtr recv_async(at::Tensor tensor, int src, int tag) override;
  WorkPtr barrier_async() override;
  WorkPtr all_to_all_async(at::Tensor input, at::Tensor output, std::vector<int64_t> send_counts,
                           std::vector<int64_t> recv_counts) override;

  struct Impl;  // NCCL comm, stream, device (nccl_communicator.cpp)

 private:
  NcclCommunicator(std::unique_ptr<Impl> impl, CommOptions options);
  // lane: the point-to-point lane to run on (nullptr: this communicator's own stream).
  WorkPtr issue(OpKind kind, int64_t bytes, int peer, const std::function<void()>& enqueue,
                std::function<void()> finish, Impl* lane = nullptr);
  // The lane a send to `peer` (or a receive from it) travels on.
  Impl& p2p_lane(int peer, bool receiving);
  std::unique_ptr<Impl> impl_;
};

// Visible CUDA devices; 0 with *error set when the runtime reports one (no driver, no device).
int cuda_device_count(std::string* error);

// "2.28.3" from ncclGetVersion, and the CUDA runtime version as "13.0".
std::string nccl_version_string();
std::string cuda_runtime_version_string();

}  // namespace hlp::comm
