#pragma once
// Time on a GPU (built only on the CUDA path, target hlp_comm_nccl; CUDA runtime API only).
//
// Assumption this file rests on: HLP never changes LibTorch's current CUDA stream, so every
// kernel of the training step runs on the legacy default stream (the "compute stream"), and
// each NCCL communicator runs on its own cudaStreamNonBlocking stream (nccl_communicator.cpp).
//
// - NCCL Work::wait() does not block the host: it makes the compute stream wait on the op's
//   completion event (cudaStreamWaitEvent) and records a timing event on the compute stream
//   just before that wait. Exposed communication is the time the compute stream stood still:
//   max(0, elapsed(wait_start, done)). Those pairs are kept process-wide (backward runs on
//   LibTorch's CUDA device thread, where DDP/FSDP wait) and settled into the BlockedTotals of
//   the thread that settles them (the training thread: collective / point-to-point seconds,
//   communicator.h) once both events completed, i.e. after a synchronize.
// - Phase times: hlp's phase timers (parallel::ComputeTimer) call synchronize_timed_device()
//   when their scope ends, so a phase's wall time includes its kernels; settled device waits
//   are then subtracted from it like host waits. docs/measurement.md says what that costs.
// - A watchdog thread replaces the host's timeout polling: an op whose completion event has
//   not fired within the comm timeout ends the job as in communicator.h.
#include <cstdint>
#include <memory>

#include "comm/observer.h"

namespace hlp::comm {

// An owned cudaEvent_t (timing enabled), shared by a Work, the wait ledger and the watchdog.
class CudaEvent {
 public:
  CudaEvent();  // cudaEventCreate
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void* handle() const { return event_; }  // cudaEvent_t
  void record_on(void* stream);            // cudaEventRecord(event, (cudaStream_t)stream)
  bool completed() const;                  // cudaEventQuery

 private:
  void* event_ = nullptr;
};
using CudaEventPtr = std::shared_ptr<CudaEvent>;

// The compute stream (legacy default stream) waits for `done` on the device; the wait is
// noted for settle_device_waits() and watched for the timeout. Called by NCCL Work::wait().
void device_wait(const CudaEventPtr& done, OpKind kind, int64_t bytes, double timeout_s);

// Adds the finished device waits (of any thread) to the calling thread's BlockedTotals. Waits
// whose events have not completed yet stay pending.
void settle_device_waits();

// The CUDA device whose phases are timed (-1 = none: a CPU run; then nothing below syncs).
void set_timed_cuda_device(int device);
int timed_cuda_device();
// cudaDeviceSynchronize on the timed device, then settle_device_waits(). No-op on CPU runs.
void synchronize_timed_device();

}  // namespace hlp::comm
