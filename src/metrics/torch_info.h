#pragma once
// LibTorch-dependent facts for the result file: the LibTorch version and the peak FLOP/s
// that MFU divides by. Defined in files that include ATen (link hlp_metrics, not _core).
#include <optional>
#include <string>

namespace hlp::metrics {

// "1.13.0" from TORCH_VERSION (torch/version.h) of the LibTorch this binary was built with.
std::string libtorch_version();

struct PeakFlops {
  double flops_per_s = 0.0;  // per device (CPU: per rank, on this rank's intra-op threads)
  std::string source;        // what the number is, e.g. "measured: at::mm float32 2048^2 ..."
};

// Measures the CPU peak of this rank: repeated at::mm on n x n float32 for about `seconds`,
// on the current at::get_num_threads() threads; returns the best rate (2 n^3 / time).
// Call it with the same thread count the training uses.
PeakFlops measure_cpu_peak_flops(double seconds = 0.5, int64_t n = 1024);

}  // namespace hlp::metrics
