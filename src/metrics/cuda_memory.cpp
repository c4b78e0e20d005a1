// The CUDA path compiles only with a CUDA LibTorch: src/metrics/CMakeLists.txt defines
// HLP_HAVE_CUDA_TORCH when HLP_HAVE_CUDA is on and LibTorch reports TORCH_CUDA_LIBRARIES. (Debian's
// CPU-only LibTorch ships the c10/cuda headers but not libc10_cuda, so __has_include is no test.)
// On the development machines the stubs below build.
#include "metrics/cuda_memory.h"

#if defined(HLP_HAVE_CUDA_TORCH)
#define HLP_CUDA_MEMORY_STATS 1
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace hlp::metrics {

#ifdef HLP_CUDA_MEMORY_STATS
// ---- CUDA LibTorch: c10::cuda::CUDACachingAllocator statistics (UNTESTED here: no GPU) ----
bool cuda_memory_available() { return true; }

MemoryStats cuda_memory_stats(int device) {
  using namespace c10::cuda::CUDACachingAllocator;
  const DeviceStats stats = getDeviceStats(device);
  const auto& allocated = stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)];
  MemoryStats s;
  s.current_bytes = allocated.current;
  s.peak_bytes = allocated.peak;
  s.allocations = stats.allocation[static_cast<size_t>(StatType::AGGREGATE)].allocated;
  return s;
}

void cuda_reset_peak(int device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device); }
#else
// ---- CPU-only LibTorch ----
bool cuda_memory_available() { return false; }
MemoryStats cuda_memory_stats(int) { return {}; }
void cuda_reset_peak(int) {}
#endif

}  // namespace hlp::metrics
