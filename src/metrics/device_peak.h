#pragma once
// Peak dense BF16/FP16 tensor FLOP/s of known GPUs (vendor datasheets, dense, no sparsity), for
// MFU on clusters. Matched by substring of the device name (e.g. torch's device name
// "NVIDIA H100 80GB HBM3"). LibTorch-free.
#include <optional>
#include <string>

namespace hlp::metrics {

struct DevicePeak {
  double flops_per_s = 0.0;
  std::string source;  // "table: H100 SXM BF16 dense 989 TFLOP/s"
};

// nullopt for unknown devices (the caller then has to measure or state a peak).
std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name);

}  // namespace hlp::metrics
