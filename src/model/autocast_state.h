#pragma once
// The calling thread's CPU and CUDA autocast switches, and a region that holds both off
// (NoAutocastGuard). The one place that knows the API's versions: LibTorch 1.13 - 2.3 name them per device (set_cpu_enabled, set_enabled /
// set_autocast_gpu_dtype for CUDA), 2.4 on take a device type and deprecate the old names.
// CUDA autocast changes only ops on CUDA tensors; its switch works without a GPU.
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>

#include "model/precision.h"

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

// The autocast dtype of a reduced precision (fp32: float32, i.e. no autocast).
inline at::ScalarType autocast_dtype(Precision p) {
  switch (p) {
    case Precision::bf16: return at::kBFloat16;
    case Precision::fp16: return at::kHalf;
    case Precision::fp32: break;
  }
  return at::kFloat;
}

// The dtype of a resolved base dtype (fp32, bf16, fp16).
inline at::ScalarType scalar_type(BaseDtype d) {
  switch (d) {
    case BaseDtype::bf16: return at::kBFloat16;
    case BaseDtype::fp16: return at::kHalf;
    case BaseDtype::automatic:
    case BaseDtype::fp32: break;
  }
  return at::kFloat;
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

// An fp32 region inside an autocast forward: while one lives, neither CPU nor CUDA autocast
// recasts an op's inputs, so ops run in the dtype of the tensors they are given. Used where the
// math needs float32's range whatever --precision says (the Gated DeltaNet core, the blocked
// attention tiles). Excluding only
// AutocastCPU would leave CUDA autocast free to run the core's matmuls in bf16/fp16 on a GPU.
class NoAutocastGuard {
 public:
  NoAutocastGuard() : guard_(keys()) {}
  static c10::DispatchKeySet keys() {
    return c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA});
  }

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

}  // namespace hlp::model
