#pragma once
// The one place that depends on the LibTorch version for autocast (the project's rule, as in
// model/sdpa_attention.h): LibTorch 1.13 - 2.3 have per-device functions (is_cpu_enabled /
// set_cpu_enabled / set_autocast_cpu_dtype for the CPU, is_enabled / set_enabled /
// set_autocast_gpu_dtype for CUDA); 2.4 replaced them with is_autocast_enabled(DeviceType),
// set_autocast_enabled(DeviceType, bool) and set_autocast_dtype(DeviceType, ScalarType) and
// deprecated the old ones. Only strategy_util.cpp includes this.
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define HLP_AUTOCAST_DEVICE_API 1
#endif

namespace hlp::parallel {

// Whether autocast is on for CUDA (cuda = true) or the CPU.
inline bool autocast_enabled(bool cuda) {
#if defined(HLP_AUTOCAST_DEVICE_API)
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

// Turns autocast on (with bfloat16 as the lower precision) or off for CUDA or the CPU.
inline void set_autocast_bf16(bool cuda, bool enabled) {
#if defined(HLP_AUTOCAST_DEVICE_API)
  const at::DeviceType type = cuda ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_enabled(type, enabled);
  if (enabled) at::autocast::set_autocast_dtype(type, at::kBFloat16);
#else
  if (cuda) {
    at::autocast::set_enabled(enabled);
    if (enabled) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    if (enabled) at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
#endif
}

}  // namespace hlp::parallel
