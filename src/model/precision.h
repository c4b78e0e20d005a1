#pragma once
// Compute precision of a training run (--precision) and the storage dtype of frozen weights
// (--base-dtype). Trainable parameters (master weights), gradient reduction and AdamW state are
// float32 in every mode; the compute inside the forward (and so the backward through it)
// changes with --precision:
//   fp32  everything float32
//   bf16  autocast to bfloat16 (CPU autocast; CUDA autocast where the device path provides it)
//   fp16  autocast to float16 with dynamic loss scaling (train/loss_scaler.h). CUDA: autocast
//         with at::kHalf. CPU: LibTorch has no float16 GEMM and CPU autocast accepts only
//         bfloat16 (1.13), so the matmuls are emulated in float16 (model/half_emulation.h).
// No LibTorch here (the CLI and hlp-sweep read it); the autocast dtype of each precision is
// model/autocast_state.h's autocast_dtype(Precision).
//
// Storage (--base-dtype auto|fp32|bf16|fp16): the frozen weight matrices (projection weights,
// the embedding, an untied LM head) are stored in the base dtype, as PEFT / torchtune / Megatron
// load a base model in bf16 and keep only the adapters in fp32. `auto` is the compute dtype.
// Every other parameter is float32: the trainable ones (adapters; everything under full
// finetuning) and the frozen vectors and convolution kernels (norm weights, biases, A_log,
// dt_bias: < 0.1 % of the bytes, and the decay and norm math reads them in float32). A base
// dtype other than fp32 needs the same compute dtype (the weights are then used as stored, no
// per-step cast); model/lora_linear.h says how a 16-bit weight meets a float32 input.
#include <cstdint>
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

// --base-dtype; resolved, it is fp32, bf16 or fp16 (never automatic).
enum class BaseDtype { automatic, fp32, bf16, fp16 };
inline constexpr EnumName<BaseDtype> kBaseDtypeNames[] = {{BaseDtype::automatic, "auto"},
                                                          {BaseDtype::fp32, "fp32"},
                                                          {BaseDtype::bf16, "bf16"},
                                                          {BaseDtype::fp16, "fp16"}};
inline BaseDtype parse_base_dtype(const std::string& name) {
  return parse_enum("base-dtype", name, kBaseDtypeNames);
}
inline const char* to_string(BaseDtype d) { return enum_name(d, kBaseDtypeNames); }

// The storage dtype of frozen weight matrices for `compute`: `automatic` is the compute dtype;
// fp32 goes with every precision; bf16 / fp16 only with the same compute dtype (UserError).
inline BaseDtype resolve_base_dtype(BaseDtype requested, Precision compute) {
  const BaseDtype compute_dtype = compute == Precision::bf16   ? BaseDtype::bf16
                                  : compute == Precision::fp16 ? BaseDtype::fp16
                                                               : BaseDtype::fp32;
  if (requested == BaseDtype::automatic || requested == BaseDtype::fp32) {
    return requested == BaseDtype::fp32 ? BaseDtype::fp32 : compute_dtype;
  }
  if (requested != compute_dtype)
    throw user_error("--base-dtype ", to_string(requested), " with --precision ",
                     to_string(compute), " is not supported: frozen weights are used in the dtype "
                     "they are stored in, so the compute of --precision ", to_string(compute),
                     " would cast every one of them every step; use --base-dtype auto (",
                     to_string(compute_dtype), " here) or fp32, or --precision ",
                     to_string(requested));
  return requested;
}

// Whether a parameter is stored in the base dtype: a frozen matrix (see above).
inline bool stored_in_base_dtype(bool trainable, int64_t dims) { return !trainable && dims == 2; }

// Bytes of one element of a parameter (base: resolved).
inline int64_t parameter_element_bytes(bool trainable, int64_t dims, BaseDtype base) {
  return stored_in_base_dtype(trainable, dims) && base != BaseDtype::fp32 ? 2 : 4;
}

}  // namespace hlp::model
