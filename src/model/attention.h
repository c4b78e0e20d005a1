#pragma once
// Causal softmax self-attention with RoPE and grouped-query attention (GQA), optionally
// restricted to a sliding window: query i sees keys j with i - window < j <= i.
// Parameter names (PEFT / Qwen2): q_proj, k_proj, v_proj (bias if attn_qkv_bias), o_proj.
//
// Qwen3.5 / Qwen3-Next gated attention (config.attn_output_gate, attn_qk_norm, attn_rotary_dim):
// q_proj yields per head [query (head_dim) | gate (head_dim)]; q and k are RMS-normalised per
// head (q_norm, k_norm, [head_dim]) before RoPE, which rotates the first attn_rotary_dim dims of
// each head (rotate-half within them, frequencies over that width) and passes the rest; the
// attention output [B, T, H*hd] is multiplied by sigmoid(gate) before o_proj.
//
// The head counts are read from the projection outputs at run time (q_proj rows / head_dim),
// so a tensor-parallel shard holding a slice of the heads runs the same code.
//
// Three kernels compute the same softmax(q k^T / sqrt(hd) + mask) v (ModelConfig::attn_impl):
// naive (the reference, [B, H, T, T] tensors), blocked (blocked_attention.h, linear memory) and
// sdpa (sdpa_attention.h, CUDA with LibTorch >= 2).
#include <torch/torch.h>

#include "model/config.h"
#include "model/layers.h"
#include "model/lora_linear.h"

namespace hlp::model {

class ContextShard;

// Rotary embedding (rotate-half convention) at positions 0..T-1, or at `positions` [T] (int64,
// a context-parallel piece's global positions). x: [B, H, T, hd].
torch::Tensor apply_rope(const torch::Tensor& x, double theta,
                         const torch::Tensor& positions = torch::Tensor());
// RoPE over the first `rotary_dim` dims of each head (apply_rope of that slice, frequencies
// over its width), the rest passed through; rotary_dim = hd is apply_rope.
torch::Tensor apply_partial_rope(const torch::Tensor& x, double theta, int64_t rotary_dim,
                                 const torch::Tensor& positions = torch::Tensor());

// allowed[i][j] = (j <= i) && (i - j < window); window <= 0 means full causal. [T, T] bool.
torch::Tensor causal_window_mask(int64_t seq_len, int64_t window, const torch::Device& device);

// The reference kernel: materialises the scores and probabilities [B, H, T, T] and repeats
// K/V for GQA. q: [B, H, T, hd]; k, v: [B, KVH, T, hd] -> [B, H, T, hd].
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t window);

// Dispatches to the kernel `impl` (auto resolved for q's device). Shapes as naive_attention.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     int64_t window, AttnImpl impl);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  // window <= 0: full causal attention (A layers); window > 0: sliding window (S layers).
  CausalSelfAttentionImpl(const ModelConfig& config, int64_t window);

  // x: [B, T, D] -> [B, T, D]. Under a ContextShard (context_shard.h) x holds this rank's
  // pieces of the sequence and the keys of the others come through the shard.
  torch::Tensor forward(const torch::Tensor& x);
  // Under an all-to-all shard (context_shard.h): this rank's q [B, H, L, hd] and k, v
  // [B, KVH, L, hd] (RoPE applied) re-sharded to heads, attended over the whole sequence,
  // returned as [B, H, L, hd] of this rank's tokens.
  torch::Tensor attend_heads(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             ContextShard& cp);

  LoRALinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // attn_qk_norm only
  int64_t head_dim;
  bool output_gate = false;
  int64_t rotary_dim;  // the rotated width of each head (= head_dim: all of it)
  int64_t window;
  double rope_theta;
  AttnImpl attn_impl;  // which kernel (HybridLM::set_attn_impl changes it)
};
TORCH_MODULE(CausalSelfAttention);

}  // namespace hlp::model
