// LibTorch-side facts recorded in result files: the CPU peak measured in the run, the GPU table,
// the LibTorch version.
#include "catch_compat.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cmath>

#include "metrics/cuda_memory.h"
#include "metrics/device_peak.h"
#include "metrics/torch_info.h"

using namespace hlp::metrics;

TEST_CASE("metrics torch info: the CPU peak is a measured, finite rate that says how it was measured",
          "[peak]") {
  const PeakFlops p = measure_cpu_peak_flops(0.05, 256);
  CHECK(std::isfinite(p.flops_per_s));
  CHECK(p.flops_per_s > 0.0);
  CHECK(p.source.find("measured") != std::string::npos);
  CHECK(p.source.find("256x256") != std::string::npos);
  CHECK(p.source.find(std::to_string(at::get_num_threads()) + " intra-op thread") !=
        std::string::npos);
}

TEST_CASE("metrics torch info: known GPUs map to their datasheet peaks, unknown ones to nothing",
          "[peak]") {
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-40GB")->flops_per_s == 312e12);
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3")->flops_per_s == 989e12);
  CHECK(gpu_peak_flops("NVIDIA H100 PCIe")->flops_per_s == 756e12);
  CHECK(gpu_peak_flops("NVIDIA H200")->flops_per_s == 989e12);
  CHECK(gpu_peak_flops("Tesla V100-SXM2-32GB")->flops_per_s == 125e12);
  CHECK(gpu_peak_flops("tesla v100-sxm2-32gb")->source.find("V100") != std::string::npos);
  CHECK_FALSE(gpu_peak_flops("Radeon 7900").has_value());
}

TEST_CASE("metrics torch info: the GPU table has a 16-bit and an fp32 dense peak per GPU, "
          "each naming its datasheet row", "[peak]") {
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", PeakPrecision::half)->flops_per_s == 989e12);
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", PeakPrecision::fp32)->flops_per_s == 67e12);
  CHECK(gpu_peak_flops("NVIDIA H100 NVL", PeakPrecision::half)->flops_per_s == 835e12);
  CHECK(gpu_peak_flops("NVIDIA H200", PeakPrecision::fp32)->flops_per_s == 67e12);
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", PeakPrecision::fp32)->flops_per_s == 19.5e12);
  CHECK(gpu_peak_flops("NVIDIA L40S", PeakPrecision::half)->flops_per_s == 362e12);
  CHECK(gpu_peak_flops("NVIDIA L40S", PeakPrecision::fp32)->flops_per_s == 91.6e12);
  // V100 has no bf16: its 16-bit peak is the fp16 tensor-core one, and the source says so.
  const auto v100 = gpu_peak_flops("Tesla V100-SXM2-32GB", PeakPrecision::half);
  REQUIRE(v100.has_value());
  CHECK(v100->flops_per_s == 125e12);
  CHECK(v100->source.find("FP16") != std::string::npos);
  CHECK(gpu_peak_flops("Tesla V100-SXM2-32GB", PeakPrecision::fp32)->flops_per_s == 15.7e12);
  CHECK(gpu_peak_flops("Tesla V100-PCIE-32GB", PeakPrecision::fp32)->flops_per_s == 14e12);
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", PeakPrecision::fp32)
            ->source.find("FP32 dense 67 TFLOP/s") !=
        std::string::npos);
  CHECK_FALSE(gpu_peak_flops("Radeon 7900", PeakPrecision::fp32).has_value());
}

TEST_CASE("metrics torch info: the LibTorch version is the one compiled against", "[peak]") {
  CHECK(libtorch_version() == TORCH_VERSION);
  // "MAJOR.MINOR.PATCH" of the headers' macros (1.13 on Debian 12, 2.6 on Debian 13, 2.x from pip)
  CHECK(libtorch_version().rfind(std::to_string(TORCH_VERSION_MAJOR) + "." +
                                     std::to_string(TORCH_VERSION_MINOR) + ".",
                                 0) == 0);
}

TEST_CASE("metrics torch info: without a CUDA LibTorch the CUDA memory path reports unavailable",
          "[cuda]") {
#ifndef HLP_HAVE_CUDA_TORCH
  CHECK_FALSE(cuda_memory_available());
  CHECK(cuda_memory_stats(0).peak_bytes == 0);
#else
  CHECK(cuda_memory_available());
#endif
}
