#pragma once
// Measured GPU memory from the CUDA caching allocator: allocated bytes (current and peak; the
// peak is what peak_bytes means on CUDA runs) and reserved bytes (current and peak).
// Only a CUDA LibTorch provides it: cuda_memory_available() is false otherwise, and the other
// functions then return zeros / do nothing. LibTorch-free header.
#include "metrics/memory.h"

namespace hlp::metrics {

bool cuda_memory_available();
MemoryStats cuda_memory_stats(int device);
void cuda_reset_peak(int device);

}  // namespace hlp::metrics
