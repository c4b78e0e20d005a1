#pragma once
// Compute precision of a training run (--precision). Parameters (master weights), gradient
// reduction and AdamW state are float32 in every mode; only the compute inside the forward (and
// so the backward through it) changes:
//   fp32  everything float32
//   bf16  autocast to bfloat16 (CPU autocast; CUDA autocast where the device path provides it)
//   fp16  autocast to float16 with dynamic loss scaling (train/loss_scaler.h). CUDA: autocast
//         with at::kHalf. CPU: LibTorch has no float16 GEMM and CPU autocast accepts only
//         bfloat16 (1.13), so the matmuls are emulated in float16 (model/half_emulation.h).
// No LibTorch here (the CLI and hlp-sweep read it); the autocast dtype of each precision is
// model/autocast_state.h's autocast_dtype(Precision).
#include <string>

#include "common/enum_names.h"

namespace hlp::model {

enum class Precision { fp32, bf16, fp16 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};

inline Precision parse_precision(const std::string& name) {
  return parse_enum("precision", name, kPrecisionNames);
}
inline const char* to_string(Precision p) { return enum_name(p, kPrecisionNames); }

}  // namespace hlp::model
