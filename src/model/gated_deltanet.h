#pragma once
// Gated DeltaNet layer (docs/model-math.md, "Gated DeltaNet"; as in the public fla reference
// implementation):
//   q = SiLU(conv(q_proj x)), k = SiLU(conv(k_proj x)), v = SiLU(conv(v_proj x))   (width-4
//   causal depthwise convolutions); q, k L2-normalised per head, q scaled by dk^-1/2;
//   beta = sigmoid(b_proj x); g = -exp(A_log) * softplus(a_proj x + dt_bias);
//   o = gated delta rule (chunked or recurrent core, gdn_core.h);
//   out = o_proj(RMSNorm_per_head(o) * SiLU(g_proj x)).
// Parameter names: q_proj k_proj v_proj a_proj b_proj g_proj o_proj (all LoRALinear, no bias),
// q_conv1d.weight k_conv1d.weight v_conv1d.weight [C, 1, 4], A_log [H], dt_bias [H],
// o_norm.weight [dv].
//
// JetBlock variant (config.gdn_variant = jetblock, docs/model-math.md, "The JetBlock variant"):
// q = SiLU(q_proj x), k = SiLU(k_proj x) without convolutions; v = SiLU(dynamic_conv(v_proj x))
// whose width-4 kernel per token and channel is kernel_generator.w2(SiLU(kernel_generator.w1 x))
// + w2.bias. Names:
// dynamic_conv1d.kernel_generator.w1 [H*dv/8, D], .w2 [H*dv*4, H*dv/8] with bias (LoRALinear).
//
// Qwen3.5 / Qwen3-Next variant (config.gdn_variant = qwen3_5; transformers' Qwen3_5GatedDeltaNet):
// the same math with transformers' modules: qkv = in_proj_qkv x [B, T, 2 Hk dk + H dv] through one
// causal depthwise conv1d [2 Hk dk + H dv, 1, width] + SiLU, split q | k | v; q, k (Hk heads)
// L2-normalised, q scaled, then each q / k head repeated for the H / Hk value heads it serves
// (head h uses key head h / (H / Hk)); beta = sigmoid(in_proj_b x), g = -exp(A_log) *
// softplus(in_proj_a x + dt_bias) over H heads; out = out_proj(norm(o) * SiLU(in_proj_z x)).
// Names: in_proj_qkv in_proj_z in_proj_b in_proj_a out_proj (LoRALinear, no bias), conv1d.weight,
// A_log [H], dt_bias [H], norm.weight [dv]. A depthwise convolution works per channel, so the
// one conv1d is the three convolutions of the gated_deltanet variant over q | k | v.
//
// Head count is read from tensor shapes (q_proj rows / dk), so a tensor-parallel shard holding
// a slice of the heads (and the matching rows of A_log, dt_bias, a/b_proj, convs) runs as is.
#include <torch/torch.h>

#include "model/config.h"
#include "model/context_shard.h"
#include "model/gdn_core.h"

#include <functional>

#include "model/layers.h"
#include "model/lora_linear.h"

namespace hlp::model {

// Causal depthwise convolution over time followed by SiLU. weight: [channels, 1, width].
class ShortConvImpl : public torch::nn::Module {
 public:
  ShortConvImpl(int64_t channels, int64_t width);
  // x: [B, T, channels] -> [B, T, channels]; output t sees inputs t-width+1 .. t
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  Kernels kernels = Kernels::automatic;  // lean: keeps x only, recomputes in backward
};
TORCH_MODULE(ShortConv);

// JetBlock's token-dependent causal depthwise convolution followed by SiLU.
class DynamicShortConvImpl : public torch::nn::Module {
 public:
  DynamicShortConvImpl(int64_t generator_in, int64_t channels, int64_t width, int64_t reduction);
  // x: [B, T, C] values, generator_input: [B, T, D] -> [B, T, C];
  // y[t, c] = SiLU(sum_w kernel[t, c, w] * x[t - width + 1 + w, c])
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& generator_input);
  // The two halves of forward: the per-token kernels [B, T, C * width] of generator_input, and
  // the convolution of x with given kernels (context parallelism runs them on halo-joined pieces).
  torch::Tensor generate(const torch::Tensor& generator_input);
  torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& generated);
  LoRALinear w1{nullptr}, w2{nullptr};  // registered under "kernel_generator"
  int64_t width;
  Kernels kernels = Kernels::automatic;  // fused / lean: no [B, T, C, width] windows held
};
TORCH_MODULE(DynamicShortConv);

class GatedDeltaNetImpl : public torch::nn::Module {
 public:
  explicit GatedDeltaNetImpl(const ModelConfig& config);

  // x: [B, T, D] -> [B, T, D]. Under a ContextShard (context_shard.h) x holds this rank's
  // pieces of the sequence: the convolutions get their halos and the core its entering states
  // through the shard (core_pieces), or runs head-sharded under the all-to-all scheme
  // (core_heads).
  torch::Tensor forward(const torch::Tensor& x);
  // the same on the fused CPU kernels (chunked core); forward() picks it when they apply
  torch::Tensor forward_fused(const torch::Tensor& x);

  // The delta-rule core of one piece: (q, k, v, beta, g, initial_state or undefined).
  using CoreFn = std::function<GdnResult(const torch::Tensor&, const torch::Tensor&,
                                         const torch::Tensor&, const torch::Tensor&,
                                         const torch::Tensor&, const torch::Tensor&)>;
  // The core over this rank's pieces, each finished with the state entering it (see the .cpp).
  static torch::Tensor core_pieces(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g, ContextShard& cp, const CoreFn& core);
  // The all-to-all scheme: the core over the whole sequence for this rank's heads (the inputs
  // re-sharded sequence -> heads, the output back).
  static torch::Tensor core_heads(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const torch::Tensor& beta,
                                  const torch::Tensor& g, ContextShard& cp, const CoreFn& core);

  LoRALinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  LoRALinear a_proj{nullptr}, b_proj{nullptr}, g_proj{nullptr}, o_proj{nullptr};
  // qwen3_5 variant (the others' projections stay null)
  LoRALinear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr};
  LoRALinear out_proj{nullptr};
  LoRALinear in_proj_qkvz{nullptr}, in_proj_ba{nullptr};  // qwen3_next variant
  ShortConv conv1d{nullptr};
  ShortConv q_conv1d{nullptr}, k_conv1d{nullptr}, v_conv1d{nullptr};  // gated_deltanet variant
  DynamicShortConv dynamic_conv1d{nullptr};                           // jetblock variant
  torch::Tensor A_log;    // [H]
  torch::Tensor dt_bias;  // [H]
  RMSNorm o_norm{nullptr};  // registered as "norm" in the qwen3_5 variant

  int64_t head_dim_k, head_dim_v, chunk_size;
  int64_t key_heads = 0;  // qwen3_5: q / k heads (config.gdn_key_heads); else = value heads
  GdnMode mode;
  GdnVariant variant;
  // fused: gates, q/k normalisation, chunked core and output gate as fused CPU kernels; lean:
  // the same pieces as memory-lean ATen operations (kernels/lean_ops.h; the chunked core only
  // with gdn_mode chunked); set_kernels() also switches the convolutions and o_norm.
  Kernels kernels = Kernels::automatic;
  void set_kernels(Kernels k);

 private:
  // path: the resolved kernels (reference, lean or fused) this forward runs
  torch::Tensor forward_impl(const torch::Tensor& x, Kernels path);
  // The projections and convolutions of each variant: q [B, T, H*dk] (repeated to the value
  // heads), k likewise, v [B, T, H*dv] (jet: q / k before their SiLU); the output gate's input
  // z [B, T, H*dv], and a, b [B, T, H] before their activations.
  struct Projected {
    torch::Tensor q, k, v, z, a, b;
  };
  Projected project(const torch::Tensor& x);
};
TORCH_MODULE(GatedDeltaNet);

}  // namespace hlp::model
