#pragma once
// The fused CPU kernels as autograd operations (custom torch::autograd::Function with
// hand-written backward). Same math as the op-by-op reference modules; `--kernels fused`
// (ModelConfig::kernels) switches the modules onto these where fused::applicable() says so.
#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "model/config.h"
#include "model/gdn_core.h"

namespace hlp::model::fused {

// True when the fused path runs: kernels == fused, every tensor on the CPU in float32 or
// float64 of one dtype. CUDA tensors and bf16 (autocast) keep the reference path.
bool applicable(Kernels kernels, std::initializer_list<torch::Tensor> tensors);

// x [..., D], weight [D] -> x / sqrt(mean(x^2) + eps) * weight
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// the same times SiLU(gate), gate shaped like x (the Gated DeltaNet output gate)
torch::Tensor gated_rms_norm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& gate, double eps);
// SiLU(gate) * up
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);
// x [B, T, C], kernels [B, T, C * width] -> SiLU(dynamic causal conv) [B, T, C]
torch::Tensor dynamic_conv_silu(const torch::Tensor& x, const torch::Tensor& conv_kernels,
                                int64_t width);
// x [..., H * head_dim] -> per head scale * n / sqrt(sum n^2 + 1e-6), n = SiLU(x) or x
torch::Tensor l2_normalize(const torch::Tensor& x, int64_t head_dim, double scale,
                           bool apply_silu);
// a, b [..., H]; A_log, dt_bias [H] -> {beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)}
std::pair<torch::Tensor, torch::Tensor> gdn_gates(const torch::Tensor& a, const torch::Tensor& b,
                                                  const torch::Tensor& A_log,
                                                  const torch::Tensor& dt_bias);

// What the delta-rule backward gets of the state: the state entering every chunk saved by the
// forward (dk * dv / chunk more floats a token and head: 96 for small's G layers, 3 MiB a layer
// and sequence at T = 2048), or recomputed by a state-only forward sweep in backward. Measured
// (hlp-bench-model --only gdn, T = 2048, 1 thread): save 2.16x the reference's speed,
// recompute 1.78x; the model's activation bytes stay at 0.62x vs 0.60x of the reference with
// either. Default: save.
enum class GdnStates { save, recompute };
// The chunked gated delta rule, gdn_core.h's contract (q, k [B, T, H, dk], v [B, T, H, dv],
// beta, g [B, T, H], initial_state [B, H, dk, dv] or undefined).
GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g,
                                   const torch::Tensor& initial_state = torch::Tensor(),
                                   int64_t chunk_size = 64,
                                   GdnStates states = GdnStates::save);

}  // namespace hlp::model::fused
