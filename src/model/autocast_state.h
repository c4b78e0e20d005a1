#pragma once
// The calling thread's CPU and CUDA autocast switches, the one place that knows the API's
// versions: LibTorch 1.13 - 2.3 name them per device (set_cpu_enabled, set_enabled /
// set_autocast_gpu_dtype for CUDA), 2.4 on take a device type and deprecate the old names.
// CUDA autocast changes only ops on CUDA tensors; its switch works without a GPU.
#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace hlp::model {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define HLP_AUTOCAST_TAKES_DEVICE 1
#else
#define HLP_AUTOCAST_TAKES_DEVICE 0
#endif

// device: at::kCPU or at::kCUDA
inline bool autocast_enabled(c10::DeviceType device) {
#if HLP_AUTOCAST_TAKES_DEVICE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if HLP_AUTOCAST_TAKES_DEVICE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == at::kCPU ? at::autocast::get_autocast_cpu_dtype()
                            : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast(c10::DeviceType device, bool on, at::ScalarType dtype) {
#if HLP_AUTOCAST_TAKES_DEVICE
  at::autocast::set_autocast_enabled(device, on);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == at::kCPU) {
    at::autocast::set_cpu_enabled(on);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(on);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace hlp::model
