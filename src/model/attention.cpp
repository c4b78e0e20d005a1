#include "model/attention.h"

#include <cmath>
#include <limits>

#include "model/blocked_attention.h"
#include "model/context_shard.h"
#include "model/sdpa_attention.h"

namespace hlp::model {

torch::Tensor apply_rope(const torch::Tensor& x, double theta, const torch::Tensor& positions) {
  const int64_t T = x.size(2), hd = x.size(3);
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  // inv_freq: [hd/2]; angles: [T, hd/2] -> [T, hd] (the two halves share frequencies)
  auto inv_freq = torch::pow(theta, -torch::arange(0, hd, 2, f64) / static_cast<double>(hd));
  auto angles = torch::outer(positions.defined() ? positions.to(f64) : torch::arange(T, f64),
                             inv_freq);
  angles = torch::cat({angles, angles}, -1);
  auto cos = angles.cos().to(x.scalar_type());
  auto sin = angles.sin().to(x.scalar_type());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor apply_partial_rope(const torch::Tensor& x, double theta, int64_t rotary_dim,
                                 const torch::Tensor& positions) {
  const int64_t hd = x.size(3);
  if (rotary_dim >= hd) return apply_rope(x, theta, positions);
  return torch::cat({apply_rope(x.narrow(3, 0, rotary_dim), theta, positions),
                     x.narrow(3, rotary_dim, hd - rotary_dim)},
                    3);
}

torch::Tensor causal_window_mask(int64_t seq_len, int64_t window, const torch::Device& device) {
  auto pos = torch::arange(seq_len, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto distance = pos.unsqueeze(1) - pos.unsqueeze(0);  // [T, T]: i - j
  auto allowed = distance >= 0;
  if (window > 0) allowed = allowed & (distance < window);
  return allowed;
}

torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t window) {
  const int64_t heads = q.size(1), kv_heads = k.size(1), T = q.size(2);
  auto k_full = k, v_full = v;
  if (heads != kv_heads) {  // GQA: each KV head serves heads / kv_heads query heads
    k_full = k.repeat_interleave(heads / kv_heads, 1);
    v_full = v.repeat_interleave(heads / kv_heads, 1);
  }
  // scores: [B, H, T, T]
  auto scores = torch::matmul(q, k_full.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  auto allowed = causal_window_mask(T, window, q.device());
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1);
  return torch::matmul(probs, v_full);  // [B, H, T, hd]
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     int64_t window, AttnImpl impl) {
  switch (resolve_attn_impl(impl, q.device())) {
    case AttnImpl::naive: return naive_attention(q, k, v, window);
    case AttnImpl::sdpa: return sdpa_attention(q, k, v, window);
    default: return blocked_attention(q, k, v, window);
  }
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& c, int64_t window_)
    : head_dim(c.attn_head_dim), output_gate(c.attn_output_gate),
      rotary_dim(c.attn_rotary_width()), window(window_), rope_theta(c.rope_theta),
      attn_impl(c.attn_impl) {
  const int64_t q_width = c.attn_heads * c.attn_head_dim;
  const int64_t kv_width = c.attn_kv_heads * c.attn_head_dim;
  // Registration order = accounting.cpp parameter_table order.
  q_proj = register_module("q_proj",
                           LoRALinear(c.hidden, output_gate ? 2 * q_width : q_width, c.attn_qkv_bias));
  k_proj = register_module("k_proj", LoRALinear(c.hidden, kv_width, c.attn_qkv_bias));
  v_proj = register_module("v_proj", LoRALinear(c.hidden, kv_width, c.attn_qkv_bias));
  o_proj = register_module("o_proj", LoRALinear(q_width, c.hidden, false));
  if (c.attn_qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(c.attn_head_dim, c.rms_eps));
    k_norm = register_module("k_norm", RMSNorm(c.attn_head_dim, c.rms_eps));
  }
}

torch::Tensor CausalSelfAttentionImpl::attend_heads(const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& v, ContextShard& cp) {
  // The all-to-all scheme: q | k | v re-sharded from this rank's tokens to its heads (KV heads
  // repeated until they divide over the ranks, attention_kv_repeat), this layer's own attention
  // over the whole sequence, the output back. q [B, H, L, hd]; k, v [B, KVH, L, hd].
  using HL = ContextShard::HeadLayer;
  const int64_t H = q.size(1), kv_heads = k.size(1), ranks = cp.layout().ranks;
  const int64_t repeat = attention_kv_repeat(H, kv_heads, ranks);  // checked by the registry
  auto kk = repeat > 1 ? k.repeat_interleave(repeat, 1) : k;
  auto vv = repeat > 1 ? v.repeat_interleave(repeat, 1) : v;
  const int64_t kvr = kv_heads * std::max<int64_t>(repeat, 1);
  // [B, L, heads, hd] per tensor; one message: per rank's share [H/p q | KV/p k | KV/p v] heads
  auto seq = [](const torch::Tensor& t) { return t.transpose(1, 2); };
  const int64_t B = q.size(0), L = q.size(2), hd = q.size(3);
  auto per_rank = [&](const torch::Tensor& t, int64_t heads) {  // [B, L, p, heads/p, hd]
    return seq(t).reshape({B, L, ranks, heads / ranks, hd});
  };
  auto packed = torch::cat({per_rank(q, H), per_rank(kk, kvr), per_rank(vv, kvr)}, 3)
                    .reshape({B, L, -1, hd});  // [B, L, p * (H + 2 KVr) / p, hd]
  auto mine = cp.to_heads(packed.contiguous(), HL::attention);  // [B, T, (H + 2 KVr) / p, hd]
  const int64_t hq = H / ranks, hkv = kvr / ranks;
  auto heads = [&](int64_t begin, int64_t n) { return mine.narrow(2, begin, n).transpose(1, 2); };
  auto out = attend(heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv), window, attn_impl);
  return cp.to_sequence(out.transpose(1, 2).contiguous(), HL::attention).transpose(1, 2);
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  // [B, T, H*hd] -> [B, H, T, hd]
  torch::Tensor q, gate;
  if (output_gate) {  // per head [query | gate]
    const auto qg = q_proj->forward(x).view({B, T, -1, 2 * head_dim});
    q = qg.narrow(3, 0, head_dim).contiguous();
    gate = qg.narrow(3, head_dim, head_dim).reshape({B, T, -1});  // [B, T, H*hd]
  } else {
    q = q_proj->forward(x).view({B, T, -1, head_dim});
  }
  auto k = k_proj->forward(x).view({B, T, -1, head_dim});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto v = v_proj->forward(x).view({B, T, -1, head_dim}).transpose(1, 2);
  torch::Tensor out;  // [B, H, T, hd]
  if (ContextShard* cp = current_context_shard()) {
    // a piece of the sequence: RoPE at the tokens' global positions, keys from the other pieces
    const auto positions = cp->layout().positions(x.device());
    q = apply_partial_rope(q, rope_theta, rotary_dim, positions);
    k = apply_partial_rope(k, rope_theta, rotary_dim, positions);
    if (cp->heads_sharded(ContextShard::HeadLayer::attention)) {
      out = attend_heads(q, k, v, *cp);
    } else {
      out = cp->attention(q, k, v, window);
    }
  } else {
    q = apply_partial_rope(q, rope_theta, rotary_dim);
    k = apply_partial_rope(k, rope_theta, rotary_dim);
    out = attend(q, k, v, window, attn_impl);
  }
  const int64_t heads = q.size(1);
  out = out.transpose(1, 2).reshape({B, T, heads * head_dim});  // [B, T, H*hd]
  if (output_gate) out = out * torch::sigmoid(gate);
  return o_proj->forward(out);
}

}  // namespace hlp::model
