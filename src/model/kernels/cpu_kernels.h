#pragma once
// Fused CPU kernels, forward and backward, without autograd (fused_ops.h wraps them in autograd
// Functions). Every kernel reads float32 or float64 tensors of one dtype, makes them contiguous,
// runs row- or head-parallel with at::parallel_for and writes fresh contiguous outputs.
// Shapes are in the comments; R = number of rows (all leading dimensions flattened).
#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

namespace hlp::model::kernels {

// ---- RMSNorm, optionally gated: y = x / sqrt(mean(x^2) + eps) * weight [* SiLU(gate)] ----
// x: [R, D], weight: [D], gate: [R, D] or undefined -> y [R, D], inv_rms [R]
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight,
                                                    const at::Tensor& gate, double eps);
// -> dx [R, D], dweight [D] (undefined unless need_weight_grad), dgate [R, D] (if gate defined)
std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& gate,
    const at::Tensor& inv_rms, bool need_weight_grad);

// ---- SwiGLU's element-wise part: h = SiLU(gate) * up ----
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);  // same shapes
// -> dgate, dup
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dh, const at::Tensor& gate,
                                                   const at::Tensor& up);

// ---- JetBlock dynamic causal convolution + SiLU ----
// x: [B, T, C], kernels: [B, T, C * W] ('(c w)' layout) ->
// y[b, t, c] = SiLU(sum_w kernels[b, t, c, w] * x[b, t - W + 1 + w, c]) (x = 0 before t = 0)
at::Tensor dynamic_conv_forward(const at::Tensor& x, const at::Tensor& kernels, int64_t width);
// -> dx [B, T, C], dkernels [B, T, C * W]; the pre-activation is recomputed, nothing else saved
std::tuple<at::Tensor, at::Tensor> dynamic_conv_backward(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& kernels, int64_t width);

// ---- Gated DeltaNet gate path ----
// Per head of head_dim channels: y = scale * n / sqrt(sum n^2 + 1e-6), n = SiLU(x) if apply_silu
// else x. x: [R, H * head_dim] -> y (same shape), inv_norm [R, H]
std::tuple<at::Tensor, at::Tensor> l2_normalize_forward(const at::Tensor& x, int64_t head_dim,
                                                        double scale, bool apply_silu);
at::Tensor l2_normalize_backward(const at::Tensor& dy, const at::Tensor& x,
                                 const at::Tensor& inv_norm, int64_t head_dim, double scale,
                                 bool apply_silu);
// beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20, as torch).
// a, b: [R, H]; A_log, dt_bias: [H] -> beta, g [R, H]
std::tuple<at::Tensor, at::Tensor> gdn_gates_forward(const at::Tensor& a, const at::Tensor& b,
                                                     const at::Tensor& A_log,
                                                     const at::Tensor& dt_bias);
// -> da, db [R, H], dA_log, ddt_bias [H]; dbeta or dg may be undefined (= 0)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gdn_gates_backward(
    const at::Tensor& dbeta, const at::Tensor& dg, const at::Tensor& a, const at::Tensor& b,
    const at::Tensor& A_log, const at::Tensor& dt_bias);

// ---- Gated delta rule, chunked, one task per (batch, head) ----
// (docs/model-math.md, "The chunked form")
// q, k: [B, T, H, dk]; v: [B, T, H, dv]; beta, g: [B, T, H]; initial_state: [B, H, dk, dv] or
// undefined. Returns output [B, T, H, dv], final state [B, H, dk, dv] and, when save_states,
// the state entering every chunk [B, H, N, dk, dv] (N = ceil(T / chunk)) for the backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> gdn_chunked_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
    const at::Tensor& g, const at::Tensor& initial_state, int64_t chunk, bool save_states);
struct GdnGrads {
  at::Tensor q, k, v, beta, g, initial_state;  // initial_state undefined when none was given
};
// d_output [B, T, H, dv], d_final_state [B, H, dk, dv] or undefined; chunk_states from the
// forward or undefined (then recomputed here by a state-only forward sweep).
GdnGrads gdn_chunked_backward(const at::Tensor& d_output, const at::Tensor& d_final_state,
                              const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& beta, const at::Tensor& g,
                              const at::Tensor& initial_state, const at::Tensor& chunk_states,
                              int64_t chunk);

}  // namespace hlp::model::kernels
