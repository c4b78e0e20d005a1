#pragma once
// Peak dense FLOP/s of known GPUs (vendor datasheets, dense, no sparsity), for MFU on clusters.
// Matched by substring of the device name (e.g. cudaDeviceProp::name "NVIDIA H100 80GB HBM3").
// LibTorch-free. Unknown GPUs: the trainer measures a peak instead (measure_device_peak_flops,
// torch_info.h) and says so in peak_flops_source.
//
// Two peaks per GPU: the 16-bit tensor-core peak (bf16; fp16 on V100, which has no bf16) that
// bf16/fp16 runs divide by, and the plain fp32 (CUDA-core, non-tensor) peak for fp32 runs:
// LibTorch does not use TF32 for fp32 matmuls unless asked (allow_tf32 is off by default for
// matmul since 1.12), and HLP does not ask.
//
// Sources (NVIDIA product datasheets):
//   V100 SXM2: "NVIDIA Tesla V100 GPU Accelerator" datasheet — FP16 tensor 125, FP32 15.7 TFLOP/s
//              (PCIe: 112 / 14)
//   A100:      "NVIDIA A100 Tensor Core GPU" datasheet — BF16 tensor 312 (624 sparse), FP32 19.5
//   H100 SXM:  "NVIDIA H100 Tensor Core GPU" datasheet — BF16 1,979 with sparsity = 989 dense,
//              FP32 67; H100 PCIe: 1,513 sparse = 756 dense, FP32 51; H100 NVL: 1,671 sparse =
//              835 dense, FP32 60
//   H200:      "NVIDIA H200 Tensor Core GPU" datasheet — BF16 1,979 sparse = 989 dense, FP32 67
//              (SXM; the NVL variant 1,671 sparse = 835 dense, FP32 60)
//   L40S:      "NVIDIA L40S GPU" datasheet — BF16 733 with sparsity = 362 dense, FP32 91.6
#include <optional>
#include <string>

namespace hlp::metrics {

struct DevicePeak {
  double flops_per_s = 0.0;
  std::string source;  // "table: H100 SXM BF16 dense 989 TFLOP/s"
};

// The 16-bit tensor-core peak (bf16; fp16 on V100). nullopt for unknown devices.
std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name);

// Which of a GPU's peaks a run can reach: the 16-bit tensor peak (a bf16 / fp16 run) or the
// plain fp32 one.
enum class PeakPrecision { fp32, half };
// nullopt for unknown devices.
std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name, PeakPrecision precision);

}  // namespace hlp::metrics
