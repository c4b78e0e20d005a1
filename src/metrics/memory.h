#pragma once
// Memory accounting: what the allocator measured and what the strategy says it holds.
// Measured numbers come from CpuAllocatorCounter (CPU) or the CUDA caching allocator
// (cuda_memory.h); category numbers come from the strategy. Comparing the two is the point:
// activation_bytes is what the measured peak holds beyond the parts the strategy accounts for.
#include <cstdint>

#include "metrics/trace_event.h"

namespace hlp::metrics {

// Allocator view of one device (bytes requested by LibTorch, not pages touched).
struct MemoryStats {
  int64_t current_bytes = 0;  // live now
  int64_t peak_bytes = 0;     // high-water mark since the last reset_peak()
  int64_t allocations = 0;    // allocations since install (counting, not live)
  // CUDA caching allocator only (0 elsewhere): bytes it holds from the driver (allocated plus
  // cached free blocks), now and the high-water mark since the last reset.
  int64_t reserved_bytes = 0;
  int64_t reserved_peak_bytes = 0;
};

// Resident set size of this process (host memory, /proc/self/statm), bytes; 0 if unreadable.
int64_t host_rss_bytes();

// What the strategy reports it holds on this rank (its shard of each category).
struct CategoryBytes {
  int64_t param_bytes = 0;      // parameters (frozen + trainable) resident on this rank
  int64_t grad_bytes = 0;       // gradient buffers
  int64_t optimizer_bytes = 0;  // optimizer state (AdamW: 2 x trainable fp32)
  int64_t sum() const { return param_bytes + grad_bytes + optimizer_bytes; }
};

// Writes current_bytes, peak_bytes, param/grad/optimizer_bytes and activation_bytes
// (= peak - sum of the parts, or `activation_bytes_reported` when >= 0) into `m`.
void fill_memory_metrics(StepMetrics& m, const MemoryStats& measured, const CategoryBytes& parts,
                         int64_t activation_bytes_reported = -1);

// Throughput and MFU for one step (everything explicit, no hidden convention):
//   tokens_per_s            = global_tokens / step_time_s       (the whole job)
//   tokens_per_s_per_device = tokens_per_s / devices
//   mfu_model    = tokens_per_s * flops_per_token_model    / (devices * peak_flops_per_device)
//   mfu_executed = tokens_per_s * flops_per_token_executed / (devices * peak_flops_per_device)
//   mfu          = mfu_model (the contract's MFU)
// global_tokens counts each token once (TP / PP partners share tokens; do not sum them).
// Also sets step_time_s. MFU entries are NaN when peak_flops_per_device <= 0.
void fill_throughput_metrics(StepMetrics& m, double global_tokens, double step_time_s,
                             int devices, double flops_per_token_model,
                             double flops_per_token_executed, double peak_flops_per_device);

}  // namespace hlp::metrics
