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

// The fallback for GPUs missing from the table (device_peak.h): best rate of at::mm on n x n
// matrices in bfloat16 (bf16 = true) or float32 on CUDA device `device_index`, timed on the
// host around batches of 8 products, each batch ended by a device-to-host read (a sync).
// Needs a CUDA LibTorch (never called otherwise).
PeakFlops measure_cuda_peak_flops(int device_index, bool bf16, double seconds = 0.3,
                                  int64_t n = 4096);

}  // namespace hlp::metrics
