#pragma once
// Measured CPU memory: wraps LibTorch's CPU allocator (c10::SetCPUAllocator) with one that counts
// the bytes of every allocation and of every free (in the DataPtr deleter), keeping the current
// total and a resettable peak. Process-wide, thread-safe (atomics), LibTorch-free header.
//
//   CpuAllocatorCounter::install();        // once, early (before the model is built)
//   CpuAllocatorCounter::reset_peak();     // at the start of each step
//   MemoryStats s = CpuAllocatorCounter::stats();   // at the end of it
//
// Tensors allocated before install() keep their original deleter and are never counted, neither
// when allocated nor when freed; tensors allocated while installed are uncounted on free even
// after uninstall() (their deleter is ours and the counters live forever).
#include "metrics/memory.h"

namespace hlp::metrics {

class CpuAllocatorCounter {
 public:
  // Installs the counting wrapper around the current CPU allocator (idempotent).
  static void install();
  // Restores the wrapped allocator (idempotent). Counting of already-counted tensors continues.
  static void uninstall();
  static bool installed();

  static int64_t current_bytes();
  static int64_t peak_bytes();
  static void reset_peak();  // peak := current
  static MemoryStats stats();
};

}  // namespace hlp::metrics
