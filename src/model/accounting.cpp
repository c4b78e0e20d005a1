#include "model/accounting.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "model/attention_tiling.h"

namespace hlp::model {

namespace {

std::string block_prefix(int64_t block) { return "blocks." + std::to_string(block) + "."; }

// The non-linear parameters of a layer, in the order HybridLM registers them.
void add_param(std::vector<ParamSpec>& table, const std::string& module, const std::string& leaf,
               std::vector<int64_t> shape, int64_t layer) {
  ParamSpec p;
  p.module = module;
  p.name = module + "." + leaf;
  p.shape = std::move(shape);
  p.numel = 1;
  for (auto d : p.shape)  // checked: validate() counts the parameters of an untrusted config
    if (__builtin_mul_overflow(p.numel, d, &p.numel))
      throw user_error("model config: ", p.name, " would have more than 2^63 elements");
  p.layer = layer;
  table.push_back(std::move(p));
}

}  // namespace

std::vector<LinearSpec> linear_table(const ModelConfig& c) {
  std::vector<LinearSpec> table;
  auto add = [&](const std::string& module, int64_t in, int64_t out, bool bias, int64_t layer,
                 double active = 1.0) {
    table.push_back(LinearSpec{module, in, out, bias, layer, active});
  };
  for (int64_t b = 0; b < c.num_layers(); ++b) {
    const int64_t layer = b + 1;
    const std::string mixer = block_prefix(b) + "mixer.";
    if (c.layer_kind(b) == LayerKind::gated_delta && c.gdn_variant == GdnVariant::qwen3_next) {
      const int64_t qk = c.gdn_key_head_count() * c.gdn_head_dim_k;
      const int64_t value = c.gdn_heads * c.gdn_head_dim_v;
      add(mixer + "in_proj_qkvz", c.hidden, 2 * qk + 2 * value, false, layer);
      add(mixer + "in_proj_ba", c.hidden, 2 * c.gdn_heads, false, layer);
      add(mixer + "out_proj", value, c.hidden, false, layer);
    } else if (c.layer_kind(b) == LayerKind::gated_delta && c.gdn_variant == GdnVariant::qwen3_5) {
      const int64_t qk = c.gdn_key_head_count() * c.gdn_head_dim_k;
      const int64_t value = c.gdn_heads * c.gdn_head_dim_v;
      add(mixer + "in_proj_qkv", c.hidden, 2 * qk + value, false, layer);
      add(mixer + "in_proj_z", c.hidden, value, false, layer);
      add(mixer + "in_proj_b", c.hidden, c.gdn_heads, false, layer);
      add(mixer + "in_proj_a", c.hidden, c.gdn_heads, false, layer);
      add(mixer + "out_proj", value, c.hidden, false, layer);
    } else if (c.layer_kind(b) == LayerKind::gated_delta) {
      const int64_t key = c.gdn_heads * c.gdn_head_dim_k, value = c.gdn_heads * c.gdn_head_dim_v;
      add(mixer + "q_proj", c.hidden, key, false, layer);
      add(mixer + "k_proj", c.hidden, key, false, layer);
      add(mixer + "v_proj", c.hidden, value, false, layer);
      add(mixer + "a_proj", c.hidden, c.gdn_heads, false, layer);
      add(mixer + "b_proj", c.hidden, c.gdn_heads, false, layer);
      add(mixer + "g_proj", c.hidden, value, false, layer);
      add(mixer + "o_proj", value, c.hidden, false, layer);
      if (c.gdn_variant == GdnVariant::jetblock) {
        const int64_t generator = value / c.gdn_dconv_reduction;
        add(mixer + "dynamic_conv1d.kernel_generator.w1", c.hidden, generator, false, layer);
        add(mixer + "dynamic_conv1d.kernel_generator.w2", generator, value * c.gdn_conv_width, true,
            layer);
      }
    } else {
      const int64_t q = c.attn_heads * c.attn_head_dim, kv = c.attn_kv_heads * c.attn_head_dim;
      add(mixer + "q_proj", c.hidden, c.attn_output_gate ? 2 * q : q, c.attn_qkv_bias, layer);
      add(mixer + "k_proj", c.hidden, kv, c.attn_qkv_bias, layer);
      add(mixer + "v_proj", c.hidden, kv, c.attn_qkv_bias, layer);
      add(mixer + "o_proj", q, c.hidden, false, layer);
    }
    const std::string mlp = block_prefix(b) + "mlp.";
    auto add_swiglu = [&](const std::string& prefix, int64_t width, double active) {
      add(prefix + "gate_proj", c.hidden, width, false, layer, active);
      add(prefix + "up_proj", c.hidden, width, false, layer, active);
      add(prefix + "down_proj", width, c.hidden, false, layer, active);
    };
    if (c.is_moe_layer(b)) {  // moe.h: router, experts, shared expert, its gate
      add(mlp + "gate", c.hidden, c.moe_experts, false, layer);
      const double routed = double(c.moe_top_k) / double(c.moe_experts);
      for (int64_t e = 0; e < c.moe_experts; ++e)
        add_swiglu(mlp + "experts." + std::to_string(e) + ".", c.moe_hidden, routed);
      if (c.moe_shared_hidden > 0) {
        add_swiglu(mlp + "shared_expert.", c.moe_shared_hidden, 1.0);
        add(mlp + "shared_expert_gate", c.hidden, 1, false, layer);
      }
    } else {
      add_swiglu(mlp, c.mlp_hidden, 1.0);
    }
  }
  return table;
}

std::vector<ParamSpec> parameter_table(const ModelConfig& c, const LoraConfig& lora) {
  std::vector<ParamSpec> table;
  const int64_t L = c.num_layers();
  add_param(table, "embed_tokens", "weight", {c.vocab, c.hidden}, 0);
  const auto linears = linear_table(c);
  auto add_linears_of = [&](int64_t layer, const std::string& prefix) {
    for (const auto& lin : linears) {
      if (lin.layer != layer || lin.module.rfind(prefix, 0) != 0) continue;
      add_param(table, lin.module, "weight", {lin.out, lin.in}, layer);
      table.back().active = lin.active;
      if (lin.bias) add_param(table, lin.module, "bias", {lin.out}, layer);
      if (lin.bias) table.back().active = lin.active;
      if (lora.targets_module(lin.module)) {
        add_param(table, lin.module, "lora_A", {lora.rank, lin.in}, layer);
        table.back().adapter = true;
        table.back().active = lin.active;
        add_param(table, lin.module, "lora_B", {lin.out, lora.rank}, layer);
        table.back().adapter = true;
        table.back().active = lin.active;
      }
    }
  };
  for (int64_t b = 0; b < L; ++b) {
    const int64_t layer = b + 1;
    const std::string prefix = block_prefix(b);
    add_param(table, prefix + "mixer_norm", "weight", {c.hidden}, layer);
    const std::string mixer = prefix + "mixer";
    add_linears_of(layer, mixer + ".");
    if (c.layer_kind(b) == LayerKind::gated_delta) {
      const int64_t key = c.gdn_heads * c.gdn_head_dim_k, value = c.gdn_heads * c.gdn_head_dim_v;
      if (c.gdn_variant == GdnVariant::gated_deltanet) {
        add_param(table, mixer + ".q_conv1d", "weight", {key, 1, c.gdn_conv_width}, layer);
        add_param(table, mixer + ".k_conv1d", "weight", {key, 1, c.gdn_conv_width}, layer);
        add_param(table, mixer + ".v_conv1d", "weight", {value, 1, c.gdn_conv_width}, layer);
      } else if (c.gdn_variant == GdnVariant::qwen3_5 || c.gdn_variant == GdnVariant::qwen3_next) {
        const int64_t qk = c.gdn_key_head_count() * c.gdn_head_dim_k;
        add_param(table, mixer + ".conv1d", "weight", {2 * qk + value, 1, c.gdn_conv_width}, layer);
      }
      add_param(table, mixer, "A_log", {c.gdn_heads}, layer);
      add_param(table, mixer, "dt_bias", {c.gdn_heads}, layer);
      const bool hf_named = c.gdn_variant == GdnVariant::qwen3_5 ||
                            c.gdn_variant == GdnVariant::qwen3_next;
      add_param(table, mixer + (hf_named ? ".norm" : ".o_norm"), "weight", {c.gdn_head_dim_v},
                layer);
    } else if (c.attn_qk_norm) {
      add_param(table, mixer + ".q_norm", "weight", {c.attn_head_dim}, layer);
      add_param(table, mixer + ".k_norm", "weight", {c.attn_head_dim}, layer);
    }
    add_param(table, prefix + "mlp_norm", "weight", {c.hidden}, layer);
    add_linears_of(layer, prefix + "mlp.");
  }
  add_param(table, "final_norm", "weight", {c.hidden}, L + 1);
  if (!c.tied_embeddings) add_param(table, "lm_head", "weight", {c.vocab, c.hidden}, L + 1);

  for (auto& p : table) {
    p.trainable = lora.full_finetune() || p.adapter || lora.saves_parameter(p.name);
  }
  return table;
}

ParamCounts count_parameters(const ModelConfig& c, const LoraConfig& lora) {
  ParamCounts counts;
  const size_t layers = static_cast<size_t>(c.num_layers() + 2);
  counts.per_layer_total.assign(layers, 0);
  counts.per_layer_trainable.assign(layers, 0);
  for (const auto& p : parameter_table(c, lora)) {
    counts.total += p.numel;
    if (p.adapter) counts.adapter += p.numel;
    counts.per_layer_total[p.layer] += p.numel;
    if (p.trainable) {
      counts.trainable += p.numel;
      counts.per_layer_trainable[p.layer] += p.numel;
    }
  }
  counts.base = counts.total - counts.adapter;
  return counts;
}

double mixing_training_flops_per_token(const ModelConfig& c, int64_t layer, int64_t seq_len) {
  const double T = static_cast<double>(seq_len);
  switch (c.layer_kind(layer)) {
    case LayerKind::full_attention:
      return 12.0 * c.attn_heads * c.attn_head_dim * T;
    case LayerKind::sliding_window:
      return 12.0 * c.attn_heads * c.attn_head_dim * std::min<double>(T, c.window);
    case LayerKind::gated_delta: {
      const double dk = c.gdn_head_dim_k, dv = c.gdn_head_dim_v;
      return 3.0 * c.gdn_heads * (6.0 * dk * dv + c.gdn_chunk * (5.0 * dk + 3.0 * dv));
    }
  }
  return 0.0;
}

namespace {

bool is_attention(const ModelConfig& c, int64_t layer) {
  return c.layer_kind(layer) != LayerKind::gated_delta;
}

int64_t layer_window(const ModelConfig& c, int64_t layer) {
  return c.layer_kind(layer) == LayerKind::sliding_window ? c.window : 0;
}

}  // namespace

MixingFlops mixing_executed_flops_per_token(const ModelConfig& c, int64_t layer,
                                            int64_t seq_len) {
  if (!is_attention(c, layer)) {
    const double total = mixing_training_flops_per_token(c, layer, seq_len);
    return {total / 3.0, 2.0 * total / 3.0};
  }
  const double T = static_cast<double>(seq_len);
  const double per_entry = static_cast<double>(c.attn_heads * c.attn_head_dim) / T;
  if (c.attn_impl == AttnImpl::naive) return {4.0 * per_entry * T * T, 8.0 * per_entry * T * T};
  const double entries =
      static_cast<double>(visited_score_entries(seq_len, layer_window(c, layer)));
  return {4.0 * per_entry * entries, 10.0 * per_entry * entries};
}

AttentionMemory attention_memory(const ModelConfig& c, int64_t layer, int64_t seq_len,
                                 int64_t micro_batch, int64_t element_bytes) {
  AttentionMemory m;
  if (!is_attention(c, layer)) return m;
  const int64_t B = micro_batch, H = c.attn_heads, KVH = c.attn_kv_heads, T = seq_len,
                hd = c.attn_head_dim;
  if (c.attn_impl == AttnImpl::naive) {
    const int64_t repeated_kv = H == KVH ? 0 : 2 * B * H * T * hd * element_bytes;
    m.saved_bytes = B * H * T * T * element_bytes + T * T + repeated_kv;
    m.transient_bytes = 3 * B * H * T * T * element_bytes;
    return m;
  }
  // blocked: fp32 inside for bf16 inputs; grouped q and output [B, H, T, hd], k and v
  // [B, KVH, T, hd], log-sum-exp [B, H, T]
  const int64_t e = std::max<int64_t>(element_bytes, 4);
  m.saved_bytes = (2 * B * H * T * hd + 2 * B * KVH * T * hd + B * H * T) * e;
  const int64_t tile = std::min<int64_t>(T, kAttentionBlock);
  m.transient_bytes = 3 * B * H * tile * tile * e + (B * H * T * hd + 2 * B * KVH * T * hd) * e;
  return m;
}

namespace {

// Parameters whose values a matmul (or conv) reads per token, per layer: everything except
// the embedding lookup; the tied matrix is moved to the head where it is multiplied.
struct MatmulParams {
  std::vector<double> frozen, trainable_base, adapter;  // per layer, in parameters
};

MatmulParams matmul_params(const ModelConfig& c, const LoraConfig& lora) {
  const size_t layers = static_cast<size_t>(c.num_layers() + 2);
  MatmulParams m{std::vector<double>(layers, 0), std::vector<double>(layers, 0),
                 std::vector<double>(layers, 0)};
  const int64_t head = c.num_layers() + 1;
  for (const auto& p : parameter_table(c, lora)) {
    int64_t layer = p.layer;
    if (p.name == "embed_tokens.weight") {
      if (!c.tied_embeddings) continue;  // a lookup, no FLOPs
      layer = head;                      // the tied LM head matmul
    }
    auto& bucket = p.adapter ? m.adapter : (p.trainable ? m.trainable_base : m.frozen);
    bucket[layer] += static_cast<double>(p.numel) * p.active;  // a routed expert: K / E of tokens
  }
  return m;
}

}  // namespace

std::vector<double> layer_forward_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const auto m = matmul_params(c, LoraConfig::none());
  std::vector<double> flops(m.frozen.size(), 0.0);
  for (size_t i = 0; i < flops.size(); ++i) flops[i] = 2.0 * (m.trainable_base[i] + m.frozen[i]);
  for (int64_t b = 0; b < c.num_layers(); ++b)
    flops[b + 1] += mixing_training_flops_per_token(c, b, seq_len) / 3.0;
  return flops;
}

std::vector<double> layer_costs(const ModelConfig& c, const LoraConfig& lora, int64_t seq_len,
                                int64_t cp_pieces) {
  const auto m = matmul_params(c, lora);
  std::vector<double> cost(m.frozen.size(), 0.0);
  for (size_t i = 0; i < cost.size(); ++i)
    cost[i] = 4.0 * m.frozen[i] + 6.0 * m.trainable_base[i] + 6.0 * m.adapter[i];
  for (int64_t b = 0; b < c.num_layers(); ++b) {
    const MixingFlops mixing = mixing_executed_flops_per_token(c, b, seq_len);
    cost[b + 1] += mixing.total();
    if (cp_pieces > 1 && c.layer_kind(b) == LayerKind::gated_delta) {
      // context parallelism: the transition pass (v = 0 from S = I: d_v -> d_k columns) on
      // (pieces - 1) / pieces of the tokens
      ModelConfig transition = c;
      transition.gdn_head_dim_v = c.gdn_head_dim_k;
      cost[b + 1] += mixing_training_flops_per_token(transition, b, seq_len) *
                     double(cp_pieces - 1) / double(cp_pieces);
    }
    if (c.activation_checkpointing) {  // one more forward of the block in backward
      cost[b + 1] += 2.0 * (m.frozen[b + 1] + m.trainable_base[b + 1] + m.adapter[b + 1]) +
                     mixing.forward;
    }
  }
  return cost;
}

TrainingFlops training_flops_per_token(const ModelConfig& c, const LoraConfig& lora,
                                       int64_t seq_len, int64_t cp_pieces) {
  TrainingFlops f;
  const auto base = matmul_params(c, LoraConfig::none());
  double n = 0, mixing = 0;
  for (size_t i = 0; i < base.frozen.size(); ++i) n += base.frozen[i] + base.trainable_base[i];
  for (int64_t b = 0; b < c.num_layers(); ++b)
    mixing += mixing_training_flops_per_token(c, b, seq_len);
  f.n_params = static_cast<int64_t>(n);
  f.model_per_token = 6.0 * n + mixing;
  for (double cost : layer_costs(c, lora, seq_len, cp_pieces)) f.executed_per_token += cost;
  return f;
}

int64_t stored_bytes(const ParamSpec& param, BaseDtype base) {
  return param.numel * parameter_element_bytes(param.trainable, int64_t(param.shape.size()), base);
}

int64_t stored_parameter_bytes(const ModelConfig& config, const LoraConfig& lora,
                               BaseDtype base) {
  int64_t bytes = 0;
  for (const auto& p : parameter_table(config, lora)) bytes += stored_bytes(p, base);
  return bytes;
}

}  // namespace hlp::model
