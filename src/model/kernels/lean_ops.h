#pragma once
// Memory-lean autograd operations written with ATen ops only, so the same code runs on the CPU
// and on CUDA (`--kernels lean`, the CUDA default). Same math as the op-by-op reference modules;
// what differs is what the autograd graph holds between forward and backward:
//
//   - the element-wise pieces (RMSNorm, gated RMSNorm, SwiGLU, the q/k L2 normalisation with its
//     SiLU, the Gated DeltaNet gates, the JetBlock dynamic convolution and the standard Gated
//     DeltaNet's causal convolution) keep only their inputs and recompute the rest in backward:
//     the reference forward is run again under autograd and differentiated (Liger's and
//     Unsloth's approach for norms and SwiGLU, fla's for the convolutions);
//   - the chunked delta-rule core keeps q, k, v, beta, g and either the state entering every
//     chunk (GdnStates::save) or nothing more (GdnStates::recompute: one state-only sweep in
//     backward); its backward runs the chunk hand-over in closed form and the per-chunk parts
//     (decays, triangular solves) under autograd, all chunks at once. The core stays float32
//     whatever the compute dtype (the caller upcasts, as on the reference path).
//
// Autocast: each operation records the CPU and CUDA autocast switches of its forward and
// re-enters them for the recomputation, so bf16 / fp16 runs recompute what they computed.
#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "model/config.h"
#include "model/gdn_core.h"
#include "model/kernels/fused_ops.h"

namespace hlp::model::lean {

// kernels == lean (any device, any dtype).
bool applicable(Kernels kernels);

// x [..., D], weight [D] -> x * rsqrt(mean(x^2) + eps) * weight (RMSNormImpl's reference)
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// rms_norm(x) * SiLU(gate), gate shaped like x (the Gated DeltaNet output gate)
torch::Tensor gated_rms_norm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& gate, double eps);
// SiLU(gate) * up
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);
// x [B, T, C], kernels [B, T, C * width] -> SiLU(dynamic causal conv) [B, T, C]
torch::Tensor dynamic_conv_silu(const torch::Tensor& x, const torch::Tensor& conv_kernels,
                                int64_t width);
// x [B, T, C], weight [C, 1, width] -> SiLU(depthwise causal conv1d) [B, T, C] (ShortConv)
torch::Tensor causal_conv_silu(const torch::Tensor& x, const torch::Tensor& weight);
// x [B, T, H * head_dim] -> [B, T, H, head_dim]: n * rsqrt(sum n^2 + 1e-6) / divisor, n = SiLU(x)
// when apply_silu else x (divisor 1: no division, as the reference does for k)
torch::Tensor l2_normalize(const torch::Tensor& x, int64_t head_dim, double divisor,
                           bool apply_silu);
// a, b [..., H]; A_log, dt_bias [H] -> {beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)}
std::pair<torch::Tensor, torch::Tensor> gdn_gates(const torch::Tensor& a, const torch::Tensor& b,
                                                  const torch::Tensor& A_log,
                                                  const torch::Tensor& dt_bias);

using fused::GdnStates;
// gdn_core.h's contract; initial_state may be undefined (zeros). Gradients reach q, k, v, beta,
// g and a defined initial_state; the final state's gradient is taken into account.
GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g,
                                   const torch::Tensor& initial_state = torch::Tensor(),
                                   int64_t chunk_size = 64, GdnStates states = GdnStates::save);

// The forward's autocast switches (CPU and CUDA; off where a NoAutocastGuard holds them off),
// recorded in an autograd context and set again for a recomputation in backward, which may run
// on a thread whose switches are off; the thread's own are restored afterwards.
void save_autocast_state(torch::autograd::AutogradContext* ctx);
class AutocastAsInForward {
 public:
  explicit AutocastAsInForward(torch::autograd::AutogradContext* ctx);
  ~AutocastAsInForward();
  AutocastAsInForward(const AutocastAsInForward&) = delete;
  AutocastAsInForward& operator=(const AutocastAsInForward&) = delete;

 private:
  std::pair<bool, at::ScalarType> previous_[2];
};

}  // namespace hlp::model::lean
