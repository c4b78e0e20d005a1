#pragma once
// The one place that depends on the LibTorch version: at::scaled_dot_product_attention exists
// from LibTorch 2.0 on. Everything else in src/model compiles against 1.13 (Debian) and 2.x.
#include <torch/torch.h>

#include <string>

#include "model/config.h"

namespace hlp::model {

// True when this build's LibTorch has scaled_dot_product_attention (>= 2.0) and `device` is CUDA
// or the CPU (LibTorch 2.x has a CPU flash kernel too).
bool sdpa_available(const torch::Device& device);

// `auto` becomes sdpa on CUDA, blocked on the CPU; an explicit sdpa that cannot run throws
// hlp::UserError saying why and what to use instead; naive and blocked stay as they are.
AttnImpl resolve_attn_impl(AttnImpl requested, const torch::Device& device);

// q: [B, H, T, hd]; k, v: [B, KVH, T, hd] -> [B, H, T, hd]. window <= 0: full causal.
// Throws hlp::UserError where sdpa_available() is false.
torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, int64_t window);

}  // namespace hlp::model
