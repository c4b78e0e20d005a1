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
  // `auto`: DeviceStats / StatType moved from c10::cuda::CUDACachingAllocator to
  // c10::CachingDeviceAllocator in LibTorch 2.6; index 0 is StatType::AGGREGATE in every version.
  constexpr size_t kAggregate = 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(device));
  MemoryStats s;
  s.current_bytes = stats.allocated_bytes[kAggregate].current;
  s.peak_bytes = stats.allocated_bytes[kAggregate].peak;
  s.allocations = stats.allocation[kAggregate].allocated;
  s.reserved_bytes = stats.reserved_bytes[kAggregate].current;
  s.reserved_peak_bytes = stats.reserved_bytes[kAggregate].peak;
  return s;
}

void cuda_reset_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}
#else
// ---- CPU-only LibTorch ----
bool cuda_memory_available() { return false; }
MemoryStats cuda_memory_stats(int) { return {}; }
void cuda_reset_peak(int) {}
#endif

}  // namespace hlp::metrics
