// UNTESTED on a GPU: the development machines have none. Compiles against the CUDA runtime
// headers only (no c10/cuda), see cuda_timing.h.
#include "comm/cuda_timing.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "comm/communicator.h"
#include "comm/thread_work.h"

namespace hlp::comm {
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(rc));
}

std::atomic<int> g_timed_device{-1};

struct PendingWait {
  CudaEventPtr wait_start, done;
  OpKind kind;
};
// Process-wide, not per thread: on CUDA, LibTorch runs backward on its own device thread, so
// FSDP's and DDP's waits inside backward are issued there, while the phase timers that settle
// them run on the training thread.
std::mutex g_pending_mutex;
std::vector<PendingWait> g_pending;

// One process-wide thread that aborts the job when an op's completion event is overdue.
class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog* dog = new Watchdog();  // never destroyed: may outlive static teardown
    return *dog;
  }
  void watch(CudaEventPtr done, OpKind kind, int64_t bytes, double timeout_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back({std::move(done), kind, bytes, timeout_s, now_s() + timeout_s});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

 private:
  struct Entry {
    CudaEventPtr done;
    OpKind kind;
    int64_t bytes;
    double timeout_s, deadline_s;
  };
  void run() {
    if (timed_cuda_device() >= 0) cudaSetDevice(timed_cuda_device());
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::lock_guard<std::mutex> lock(mutex_);
      const double now = now_s();
      for (const auto& e : watched_)
        if (!e.done->completed() && now > e.deadline_s)
          abort_on_timeout(e.kind, e.bytes, e.timeout_s);
      watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                    [](const Entry& e) { return e.done->completed(); }),
                     watched_.end());
    }
  }
  std::mutex mutex_;
  std::vector<Entry> watched_;
  std::thread thread_;
};

}  // namespace

CudaEvent::CudaEvent() {
  cudaEvent_t e;
  check_cuda(cudaEventCreate(&e), "cudaEventCreate");  // timing enabled: exposed-comm times
  event_ = e;
}

CudaEvent::~CudaEvent() { cudaEventDestroy(static_cast<cudaEvent_t>(event_)); }

void CudaEvent::record_on(void* stream) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)),
             "cudaEventRecord");
}

bool CudaEvent::completed() const {
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (rc == cudaErrorNotReady) return false;
  check_cuda(rc, "cudaEventQuery");
  return true;
}

void device_wait(const CudaEventPtr& done, OpKind kind, int64_t bytes, double timeout_s) {
  auto wait_start = std::make_shared<CudaEvent>();
  wait_start->record_on(cudaStreamLegacy);  // compute stream reached the wait here
  check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, static_cast<cudaEvent_t>(done->handle()), 0),
             "cudaStreamWaitEvent");
  {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    g_pending.push_back({std::move(wait_start), done, kind});
  }
  Watchdog::instance().watch(done, kind, bytes, timeout_s);
}

void settle_device_waits() {
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  std::vector<PendingWait> still;
  for (auto& w : g_pending) {
    if (!w.wait_start->completed() || !w.done->completed()) {
      still.push_back(std::move(w));
      continue;
    }
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(w.wait_start->handle()),
                                    static_cast<cudaEvent_t>(w.done->handle())),
               "cudaEventElapsedTime");
    // Negative: the op had finished before the compute stream got there (fully hidden).
    add_blocked_s(w.kind, std::max(0.0, double(ms) * 1e-3));
  }
  g_pending.swap(still);
}

void set_timed_cuda_device(int device) { g_timed_device = device; }
int timed_cuda_device() { return g_timed_device.load(); }

void synchronize_timed_device() {
  const int device = g_timed_device.load();
  if (device < 0) return;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  settle_device_waits();
}

}  // namespace hlp::comm
