#pragma once
// Compute precision of a training run (--precision). Parameters (master weights), gradient
// reduction and AdamW state are float32 in every mode; only the compute inside the forward (and
// so the backward through it) changes:
//   fp32  everything float32
//   bf16  autocast to bfloat16 (CPU autocast; CUDA autocast where the device path provides it)
//   fp16  autocast to float16 with dynamic loss scaling (train/loss_scaler.h). CUDA: autocast
//         with at::kHalf. CPU: LibTorch has no float16 GEMM and CPU autocast accepts only
//         bfloat16 (1.13), so the matmuls are emulated in float16 (model/half_emulation.h).
#include <torch/torch.h>

#include <string>

#include "common/error.h"

namespace hlp::model {

enum class Precision { fp32, bf16, fp16 };

inline Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  throw user_error("--precision: unknown value '", name, "'; choose fp32, bf16 or fp16");
}

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    default: return "fp32";
  }
}

// The autocast dtype of a reduced precision (fp32: float32, i.e. no autocast).
inline at::ScalarType autocast_dtype(Precision p) {
  switch (p) {
    case Precision::bf16: return at::kBFloat16;
    case Precision::fp16: return at::kHalf;
    default: return at::kFloat;
  }
}

}  // namespace hlp::model
