#include "model/hf/config_json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <type_traits>

#include "common/error.h"
#include "common/printable.h"
#include "model/config_limits.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace hlp::model::hf {
namespace {

// Reads the keys of one JSON object, recording which were used; unread keys are errors.
class Fields {
 public:
  Fields(const json& object, std::string where, HfModelConfig& out)
      : object_(object), where_(std::move(where)), out_(out) {}

  const std::string& where() const { return where_; }
  bool has(const std::string& key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  const json& at(const std::string& key) {
    used_.insert(key);
    if (!object_.contains(key))
      throw user_error(where_, ": field '", key, "' is required but missing");
    return object_.at(key);
  }
  template <typename T>
  T get(const std::string& key) {
    try {
      return at(key).get<T>();
    } catch (const json::exception&) {
      throw user_error(where_, ": field '", key, "' has the wrong type (", excerpt(at(key)), ")");
    }
  }
  double number(const std::string& key) {  // numbers, also written as strings ("1e-5")
    const json& v = at(key);
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      try {
        return std::stod(v.get<std::string>());
      } catch (const std::exception&) {
      }
    }
    throw user_error(where_, ": field '", key, "' is not a number (", excerpt(v), ")");
  }
  // The constants HLP reads as doubles (eps, rope theta, expand_v) are all > 0: a zero, negative,
  // inf or NaN one would give NaN losses or sizes far from the file's intent.
  double positive_number(const std::string& key) {
    const double x = number(key);
    if (!(x > 0) || !std::isfinite(x))
      throw user_error(where_, ": field '", key, "' = ", excerpt(at(key)),
                       " must be a finite number > 0");
    return x;
  }
  // A whole number in [lo, hi] (4.0 counts as 4). Sizes and counts divide other sizes and size
  // tensors, so 0, a negative, a fraction or an absurd value is refused here, before any
  // arithmetic. The bounds are far inside the doubles' exact integers.
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) {
    const json& v = at(key);
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    if (!(x >= double(lo) && x <= double(hi) && x == std::floor(x)))
      throw user_error(where_, ": field '", key, "' = ", excerpt(v), " must be a whole number in [",
                       lo, ", ", hi, "]");
    return static_cast<int64_t>(x);
  }
  // Sets a ModelConfig field from `key` and records where it came from. Every integer field
  // HLP reads is a size or a count (a width, heads, a head dim, a window ...), every double a
  // positive constant.
  template <typename T>
  void set(T& field, const char* field_name, const std::string& key) {
    if constexpr (std::is_same_v<T, double>) field = positive_number(key);
    else if constexpr (std::is_same_v<T, int64_t>) field = integer(key, 1, kMaxDimension);
    else field = get<T>(key);
    std::ostringstream os;
    os << field << "  <- " << where_ << ": " << key;
    out_.provenance.emplace_back(field_name, os.str());
  }
  // The fields of the object under `key` (its own unread-key check).
  Fields object(const std::string& key) {
    const json& v = at(key);
    if (!v.is_object()) throw user_error(where_, ": field '", key, "' is not a JSON object");
    return Fields(v, where_ + ": " + key, out_);
  }
  void note(const char* field_name, const std::string& text) {
    out_.provenance.emplace_back(field_name, text);
  }
  // The one value HLP implements (null counts as absent).
  void expect(const std::string& key, const json& value, const std::string& why) {
    used_.insert(key);
    if (!object_.contains(key)) return;
    const json& v = object_.at(key);
    if (v.is_null() || v == value) return;
    if (v.is_number() && value.is_number() && v.get<double>() == value.get<double>()) return;
    throw user_error(where_, ": field '", key, "' = ", excerpt(v), " is not implemented by HLP (",
                     why, "; HLP implements ", value.dump(), ")");
  }
  void no_effect(const std::vector<std::string>& keys) {
    for (const auto& k : keys)
      if (object_.contains(k)) {
        used_.insert(k);
        out_.no_effect.push_back(where_ + ": " + k);
      }
  }
  void reject_unread() const {
    for (auto& [key, value] : object_.items())
      if (!used_.count(key))
        throw user_error(where_, ": field '", printable(key), "' is not implemented by HLP (it "
                         "would change the model, and HLP does not silently ignore it); remove it "
                         "only if it does not matter for your checkpoint");
  }

 private:
  // A value of the file, quoted in a message (dump() escapes JSON's control characters;
  // printable() cuts a long array or object short).
  static std::string excerpt(const json& v) { return printable(v.dump()); }

  const json& object_;
  std::string where_;
  HfModelConfig& out_;
  std::set<std::string> used_;
};

// Fields that describe the checkpoint or the runtime, never the function HLP computes.
const std::vector<std::string> kNoEffect = {
    "architectures", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "max_position_embeddings", "torch_dtype", "dtype", "transformers_version",
    "use_cache", "_name_or_path", "tokenizer_class", "return_dict", "output_attentions",
    "output_hidden_states"};

// RoPE in either dialect: transformers 4's top-level rope_theta (and rope_scaling), or
// transformers 5's rope_parameters {rope_theta, rope_type, partial_rotary_factor}.
void read_rope(Fields& f, ModelConfig& c) {
  if (!f.has("rope_parameters")) {
    f.set(c.rope_theta, "rope_theta", "rope_theta");
    return;
  }
  Fields rope = f.object("rope_parameters");
  rope.set(c.rope_theta, "rope_theta", "rope_theta");
  rope.expect("rope_type", "default", "RoPE without scaling");
  rope.expect("partial_rotary_factor", 1.0, "rotary embedding over the whole head");
  rope.reject_unread();
  if (f.has("rope_theta") && f.positive_number("rope_theta") != c.rope_theta)
    throw user_error(f.where(), ": rope_theta ", f.number("rope_theta"),
                     " disagrees with rope_parameters.rope_theta ", c.rope_theta);
}

void read_common(Fields& f, ModelConfig& c) {
  f.set(c.hidden, "hidden", "hidden_size");
  f.set(c.mlp_hidden, "mlp_hidden", "intermediate_size");
  f.set(c.vocab, "vocab", "vocab_size");
  f.set(c.attn_heads, "attn_heads", "num_attention_heads");
  if (f.has("num_key_value_heads")) {
    f.set(c.attn_kv_heads, "attn_kv_heads", "num_key_value_heads");
  } else {
    c.attn_kv_heads = c.attn_heads;
    f.note("attn_kv_heads", std::to_string(c.attn_kv_heads) + "  <- = num_attention_heads (no num_key_value_heads)");
  }
  if (f.has("head_dim")) {
    f.set(c.attn_head_dim, "attn_head_dim", "head_dim");
  } else {
    if (c.hidden % c.attn_heads != 0)  // set() made attn_heads >= 1
      throw user_error(f.where(), ": hidden_size ", c.hidden, " is not a multiple of "
                       "num_attention_heads ", c.attn_heads, ", so head_dim cannot be derived; "
                       "give head_dim");
    c.attn_head_dim = c.hidden / c.attn_heads;
    f.note("attn_head_dim", std::to_string(c.attn_head_dim) + "  <- hidden_size / num_attention_heads");
  }
  read_rope(f, c);
  f.set(c.rms_eps, "rms_eps", "rms_norm_eps");
  if (f.has("tie_word_embeddings")) {
    f.set(c.tied_embeddings, "tied_embeddings", "tie_word_embeddings");
  } else {
    c.tied_embeddings = true;
    f.note("tied_embeddings", "1  <- transformers' default (no tie_word_embeddings)");
  }
  c.attn_qkv_bias = true;
  f.note("attn_qkv_bias", "1  <- Qwen2 family: q, k, v with bias, o without");
  f.expect("hidden_act", "silu", "the MLP is SwiGLU with SiLU");
  f.expect("rope_scaling", nullptr, "RoPE without scaling");
  f.expect("attention_dropout", 0.0, "no dropout on attention probabilities");
  f.expect("use_mrope", false, "1-D RoPE");
  f.no_effect(kNoEffect);
}

void read_jet_nemotron(Fields& f, const json& root, ModelConfig& c, HfModelConfig& out,
                       const std::string& where) {
  read_common(f, c);
  const auto types = f.get<std::vector<std::string>>("layer_types");
  const int64_t layers = f.integer("num_hidden_layers", 1, kMaxLayers);
  if (int64_t(types.size()) != layers)
    throw user_error(where, ": layer_types has ", types.size(), " entries but num_hidden_layers is ",
                     layers);
  c.pattern.clear();
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& t = types[i];
    if (t == "jet") c.pattern += 'G';
    else if (t == "attn") c.pattern += 'A';
    else if (t == "swa") c.pattern += 'S';
    else
      throw user_error(where, ": layer_types[", i, "] = '", printable(t),
                       "' is not implemented by HLP (jet, attn and swa are)");
  }
  f.note("pattern", c.pattern + "  <- " + where + ": layer_types (jet G, attn A, swa S)");
  // max_window_layers / use_sliding_window are Qwen2's; layer_types decides here.
  f.no_effect({"max_window_layers", "use_sliding_window", "sliding_window"});
  c.gdn_variant = GdnVariant::jetblock;
  f.note("gdn_variant", "jetblock  <- model_type jet_nemotron");
  const json& eff = f.at("efficient_attention_config");
  if (!eff.is_object()) throw user_error(where, ": efficient_attention_config is not an object");
  Fields e(eff, where + ": efficient_attention_config", out);
  if (c.count_layers(LayerKind::gated_delta) > 0 || eff.contains("jet")) {
    Fields jet(e.at("jet"), where + ": efficient_attention_config.jet", out);
    jet.set(c.gdn_heads, "gdn_heads", "num_heads");
    jet.set(c.gdn_head_dim_k, "gdn_head_dim_k", "head_dim");
    const double expand_v = jet.positive_number("expand_v");
    const double head_dim_v = double(c.gdn_head_dim_k) * expand_v;
    if (!(head_dim_v >= 0.5 && head_dim_v <= double(kMaxDimension)))  // before llround: no UB
      throw user_error(where, ": efficient_attention_config.jet: head_dim ", c.gdn_head_dim_k,
                       " x expand_v ", expand_v, " is not a value head dim in [1, ", kMaxDimension,
                       "]");
    c.gdn_head_dim_v = std::llround(head_dim_v);
    std::ostringstream dv;
    dv << c.gdn_head_dim_v << "  <- round(head_dim x expand_v " << expand_v << ")";
    jet.note("gdn_head_dim_v", dv.str());
    jet.set(c.gdn_conv_width, "gdn_conv_width", "conv_size");
    jet.set(c.gdn_dconv_reduction, "gdn_dconv_reduction", "dconv_generator_reduction");
    jet.set(c.gdn_norm_eps, "gdn_norm_eps", "norm_eps");
    if (eff.at("jet").contains("mode")) {
      const auto mode = jet.get<std::string>("mode");
      if (mode == "chunk" || mode == "fused_chunk") c.gdn_mode = GdnMode::chunked;
      else if (mode == "fused_recurrent" || mode == "recurrent") c.gdn_mode = GdnMode::recurrent;
      else
        throw user_error(where, ": efficient_attention_config.jet.mode '", printable(mode),
                         "' is unknown");
      jet.note("gdn_mode", to_string(c.gdn_mode) + "  <- jet.mode " + mode + " (same math)");
    }
    jet.no_effect({"dconv_implementation"});  // which kernel computes the convolution
    jet.reject_unread();
  }
  if (c.count_layers(LayerKind::sliding_window) > 0 || eff.contains("swa")) {
    Fields swa(e.at("swa"), where + ": efficient_attention_config.swa", out);
    swa.set(c.window, "window", "window_size");
    swa.reject_unread();
  }
  e.reject_unread();
  (void)root;
}

// The pattern letters of a `layer_types` list of `layers` entries: each type by `letters`, else
// one error naming the entry and what `implemented` lists.
std::string pattern_of_layer_types(Fields& f, int64_t layers, const std::string& where,
                                   const std::vector<std::pair<std::string, char>>& letters,
                                   const char* implemented) {
  const auto types = f.get<std::vector<std::string>>("layer_types");
  if (int64_t(types.size()) != layers)
    throw user_error(where, ": layer_types has ", types.size(),
                     " entries but num_hidden_layers is ", layers);
  std::string pattern;
  for (size_t i = 0; i < types.size(); ++i) {
    char letter = 0;
    for (const auto& [type, l] : letters)
      if (types[i] == type) letter = l;
    if (!letter)
      throw user_error(where, ": layer_types[", i, "] = '", printable(types[i]),
                       "' is not implemented by HLP (", implemented, " are)");
    pattern += letter;
  }
  return pattern;
}

void read_qwen2(Fields& f, ModelConfig& c, const std::string& where) {
  read_common(f, c);
  const int64_t layers = f.integer("num_hidden_layers", 1, kMaxLayers);  // before the assign
  c.pattern.assign(size_t(layers), 'A');
  if (f.has("layer_types")) {
    c.pattern = pattern_of_layer_types(f, layers, where,
                                       {{"full_attention", 'A'}, {"sliding_attention", 'S'}},
                                       "full_attention, sliding_attention");
    f.no_effect({"use_sliding_window", "max_window_layers"});
    f.note("pattern", c.pattern + "  <- " + where + ": layer_types");
  } else {
    const bool sliding = f.has("use_sliding_window") && f.get<bool>("use_sliding_window");
    // In [0, layers] it indexes the pattern below; beyond, no layer has the window (as in HF).
    const int64_t max_window_layers =
        f.has("max_window_layers") ? f.integer("max_window_layers", 0, kMaxLayers) : layers;
    if (sliding)  // transformers' Qwen2: layers from max_window_layers on use the window
      for (int64_t i = max_window_layers; i < layers; ++i) c.pattern[size_t(i)] = 'S';
    f.no_effect({"use_sliding_window", "max_window_layers"});
    f.note("pattern", c.pattern + "  <- " + where + ": num_hidden_layers, use_sliding_window, "
                                  "max_window_layers (S from max_window_layers on)");
  }
  if (c.count_layers(LayerKind::sliding_window) > 0) {
    f.set(c.window, "window", "sliding_window");
  } else {
    f.no_effect({"sliding_window"});
  }
}

// Qwen3.5's text model (model_type qwen3_5_text; also the text_config of qwen3_5): Gated
// DeltaNet "linear_attention" layers and gated full attention (docs/hf-checkpoints.md).
// Qwen3-Next (model_type qwen3_next): Qwen3.5's layers with in_proj_qkvz / in_proj_ba fused per
// key head, and sparse MoE MLPs (moe.h) where transformers' rule puts them: layer i is sparse iff
// i is not in mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step == 0. Absent
// fields take transformers' defaults (configuration_qwen3_next.py): 512 experts, 10 a token,
// widths 512, decoder_sparse_step 1, norm_topk_prob true, router_aux_loss_coef 0.001,
// output_router_logits false (the load-balancing loss is added in training only when true, as
// transformers adds it).
void read_qwen3_next_moe_fields(Fields& f, ModelConfig& c, int64_t layers) {
  const int64_t experts = f.has("num_experts") ? f.integer("num_experts", 0, kMaxDimension) : 512;
  const int64_t step =
      f.has("decoder_sparse_step") ? f.integer("decoder_sparse_step", 1, kMaxLayers) : 1;
  std::set<int64_t> dense;
  if (f.has("mlp_only_layers"))
    for (const auto& v : f.get<std::vector<int64_t>>("mlp_only_layers")) dense.insert(v);
  std::string kinds(size_t(layers), '-');
  for (int64_t i = 0; i < layers; ++i)
    if (!dense.count(i) && experts > 0 && (i + 1) % step == 0) kinds[size_t(i)] = 'E';
  f.note("moe_layers", kinds + "  <- " + f.where() + ": num_experts, decoder_sparse_step, "
                                "mlp_only_layers (E sparse, - dense)");
  const std::vector<std::string> moe = {"moe_intermediate_size", "shared_expert_intermediate_size",
                                        "num_experts_per_tok", "norm_topk_prob",
                                        "output_router_logits", "router_aux_loss_coef"};
  if (kinds.find('E') == std::string::npos) {  // every MLP dense: the MoE fields say nothing
    f.no_effect(moe);
    f.no_effect({"num_experts", "decoder_sparse_step", "mlp_only_layers"});
    return;
  }
  c.moe_layers = kinds;
  c.moe_experts = experts;
  auto size_or = [&](const char* key, int64_t fallback) {
    return f.has(key) ? f.integer(key, 1, kMaxDimension) : fallback;
  };
  c.moe_top_k = size_or("num_experts_per_tok", 10);
  c.moe_hidden = size_or("moe_intermediate_size", 512);
  c.moe_shared_hidden = size_or("shared_expert_intermediate_size", 512);
  c.moe_norm_topk = f.has("norm_topk_prob") ? f.get<bool>("norm_topk_prob") : true;
  c.moe_aux_loss = f.has("output_router_logits") && f.get<bool>("output_router_logits");
  c.moe_aux_coef = 0.001;
  if (f.has("router_aux_loss_coef")) {
    c.moe_aux_coef = f.number("router_aux_loss_coef");
    if (!(c.moe_aux_coef >= 0) || !std::isfinite(c.moe_aux_coef))
      throw user_error(f.where(), ": field 'router_aux_loss_coef' = ", c.moe_aux_coef,
                       " must be a finite number >= 0");
  }
  std::ostringstream os;
  os << c.moe_experts << " experts, top " << c.moe_top_k << (c.moe_norm_topk ? " renormalised" : "")
     << ", widths " << c.moe_hidden << " / shared " << c.moe_shared_hidden << ", aux loss "
     << (c.moe_aux_loss ? "on" : "off") << " (coef " << c.moe_aux_coef << ")  <- " << f.where();
  f.note("moe", os.str());
}

void read_qwen3_5_text(Fields& f, ModelConfig& c, const std::string& where, bool next = false) {
  f.no_effect(kNoEffect);
  f.set(c.hidden, "hidden", "hidden_size");
  f.set(c.mlp_hidden, "mlp_hidden", "intermediate_size");
  f.set(c.vocab, "vocab", "vocab_size");
  f.set(c.attn_heads, "attn_heads", "num_attention_heads");
  f.set(c.attn_kv_heads, "attn_kv_heads", "num_key_value_heads");
  f.set(c.attn_head_dim, "attn_head_dim", "head_dim");
  f.set(c.rms_eps, "rms_eps", "rms_norm_eps");
  c.gdn_norm_eps = c.rms_eps;
  f.note("gdn_norm_eps", "= rms_eps  <- Qwen3.5: the gated norm uses rms_norm_eps");
  if (f.has("tie_word_embeddings")) {
    f.set(c.tied_embeddings, "tied_embeddings", "tie_word_embeddings");
  } else {
    c.tied_embeddings = false;
    f.note("tied_embeddings", "0  <- Qwen3.5's default (no tie_word_embeddings)");
  }
  const bool bias = f.has("attention_bias") && f.get<bool>("attention_bias");
  if (bias)
    throw user_error(where, ": field 'attention_bias' = true is not implemented by HLP for "
                     "qwen3_5 (its attention has no biases; HLP implements false)");
  f.expect("attention_bias", false, "no attention biases");
  c.attn_qkv_bias = false;
  c.attn_output_gate = true;
  c.attn_qk_norm = true;
  c.norm_zero_centred = true;
  c.gdn_variant = next ? GdnVariant::qwen3_next : GdnVariant::qwen3_5;
  f.note("attn_qkv_bias", "0  <- qwen3_5: attention_bias");
  f.note("gdn_variant", next ? "qwen3_next  <- qwen3_next: gated attention, zero-centred RMSNorms, "
                               "Gated DeltaNet in_proj_qkvz / in_proj_ba fused per key head"
                             : "qwen3_5  <- qwen3_5: gated attention (q_proj [query | gate], q_norm, "
                               "k_norm), zero-centred RMSNorms, Gated DeltaNet in_proj_qkv/z/b/a");
  f.expect("hidden_act", "silu", "the MLP is SwiGLU with SiLU");
  f.expect("attention_dropout", 0.0, "no dropout on attention probabilities");
  f.expect("rope_scaling", nullptr, "RoPE without scaling");
  // Fields of the published checkpoints' config.json (Qwen/Qwen3.5-*) that transformers keeps
  // as plain attributes: the gate is always there, the core runs in float32, every MLP is dense
  // (the sparse ones are qwen3_5_moe's), and the multi-token-prediction head is not part of
  // the language model's forward (its mtp.* weights, where shipped, are left out on load).
  f.expect("attn_output_gate", true, "the gated attention of Qwen3.5");
  f.expect("mamba_ssm_dtype", "float32", "the Gated DeltaNet core in float32");
  if (!next) f.expect("mlp_only_layers", json::array(), "dense MLPs in every layer");
  f.no_effect({"mtp_num_hidden_layers", "mtp_use_dedicated_embeddings"});
  // Gated DeltaNet shapes
  f.set(c.gdn_conv_width, "gdn_conv_width", "linear_conv_kernel_dim");
  f.set(c.gdn_head_dim_k, "gdn_head_dim_k", "linear_key_head_dim");
  f.set(c.gdn_head_dim_v, "gdn_head_dim_v", "linear_value_head_dim");
  f.set(c.gdn_key_heads, "gdn_key_heads", "linear_num_key_heads");
  f.set(c.gdn_heads, "gdn_heads", "linear_num_value_heads");
  // layer_types decides the pattern (transformers' default: full attention every 4th layer)
  const int64_t layers = f.integer("num_hidden_layers", 1, kMaxLayers);
  if (next) read_qwen3_next_moe_fields(f, c, layers);
  c.pattern.clear();
  if (f.has("layer_types")) {
    c.pattern = pattern_of_layer_types(f, layers, where,
                                       {{"linear_attention", 'G'}, {"full_attention", 'A'}},
                                       "linear_attention, full_attention");
    f.no_effect({"full_attention_interval"});
    f.note("pattern", c.pattern + "  <- " + where + ": layer_types (linear_attention G, "
                                  "full_attention A)");
  } else {
    const int64_t interval =
        f.has("full_attention_interval") ? f.integer("full_attention_interval", 1, kMaxLayers) : 4;
    for (int64_t i = 0; i < layers; ++i) c.pattern += (i + 1) % interval ? 'G' : 'A';
    f.note("pattern", c.pattern + "  <- " + where + ": num_hidden_layers, full_attention_interval " +
                          std::to_string(interval) + " (transformers' rule)");
  }
  // RoPE: transformers 5 keeps it in rope_parameters; the rotated width is
  // int(head_dim * partial_rotary_factor) of rope_parameters (a top-level partial_rotary_factor,
  // which transformers 5 writes as well, only stands in where rope_parameters has none; 0.25 is
  // Qwen3.5's default). mrope (mrope_section, mrope_interleaved) rotates text-only positions
  // exactly as 1-D RoPE: every section sees the same position.
  double factor = 0.25;
  std::string factor_from = "Qwen3.5's default";
  const bool top_factor = f.has("partial_rotary_factor");
  if (top_factor) {
    factor = f.positive_number("partial_rotary_factor");
    factor_from = where + ": partial_rotary_factor";
  }
  if (f.has("rope_parameters")) {
    Fields rope = f.object("rope_parameters");
    rope.set(c.rope_theta, "rope_theta", "rope_theta");
    rope.expect("rope_type", "default", "RoPE without scaling");
    if (rope.has("partial_rotary_factor")) {
      factor = rope.positive_number("partial_rotary_factor");
      factor_from = rope.where() + ": partial_rotary_factor";
      if (top_factor) f.no_effect({"partial_rotary_factor"});
    }
    rope.no_effect({"mrope_section", "mrope_interleaved"});
    rope.reject_unread();
  } else {
    f.set(c.rope_theta, "rope_theta", "rope_theta");
  }
  f.no_effect({"use_mrope"});
  if (!(factor <= 1.0))
    throw user_error(where, ": partial_rotary_factor ", factor, " must be in (0, 1]");
  c.attn_rotary_dim = static_cast<int64_t>(double(c.attn_head_dim) * factor);  // int() as Python
  if (c.attn_rotary_dim % 2 != 0 || c.attn_rotary_dim < 2)
    throw user_error(where, ": head_dim ", c.attn_head_dim, " x partial_rotary_factor ", factor,
                     " = ", c.attn_rotary_dim, " rotated dims: RoPE needs an even number >= 2");
  std::ostringstream rot;
  rot << c.attn_rotary_dim << "  <- int(head_dim x partial_rotary_factor " << factor << ", "
      << factor_from << ")";
  f.note("attn_rotary_dim", rot.str());
}

}  // namespace

HfModelConfig read_hf_config(const std::string& path) {
  fs::path file = path;
  if (fs::is_directory(file)) file /= "config.json";
  std::ifstream in(file);
  if (!in) throw user_error("--model-config: cannot read '", file.string(), "'");
  json root;
  try {
    in >> root;
  } catch (const json::exception& e) {
    throw user_error("--model-config: '", file.string(), "' is not JSON: ", printable(e.what()));
  }
  if (!root.is_object()) throw user_error("--model-config: '", file.string(), "' is not a JSON object");
  HfModelConfig out;
  const std::string where = file.filename().string();
  Fields f(root, where, out);
  out.model_type = f.get<std::string>("model_type");
  ModelConfig c;
  if (out.model_type == "jet_nemotron") {
    read_jet_nemotron(f, root, c, out, where);
  } else if (out.model_type == "qwen2") {
    read_qwen2(f, c, where);
  } else if (out.model_type == "qwen3_5_text") {
    read_qwen3_5_text(f, c, where);
    c.hf_layout = HfLayout::qwen3_5;
  } else if (out.model_type == "qwen3_next") {
    read_qwen3_5_text(f, c, where, /*next=*/true);
    c.hf_layout = HfLayout::qwen3_5;
  } else if (out.model_type == "qwen3_5") {
    // the vision-language checkpoint: HLP trains its text model (model.language_model.*, the
    // LM head); the vision tower's config and weights are reported and left out
    Fields text = f.object("text_config");
    text.expect("model_type", "qwen3_5_text", "the text model of qwen3_5");
    read_qwen3_5_text(text, c, where + ": text_config");
    text.reject_unread();
    c.hf_layout = HfLayout::qwen3_5_vl;
    // transformers' Qwen3_5ForConditionalGeneration ties by the top-level flag (default false);
    // text_config's is read above and then overruled
    c.tied_embeddings = f.has("tie_word_embeddings") && f.get<bool>("tie_word_embeddings");
    f.note("tied_embeddings", std::string(c.tied_embeddings ? "1" : "0") + "  <- " + where +
                                  ": tie_word_embeddings (the wrapper's; text_config's has no "
                                  "effect on it)");
    f.no_effect(kNoEffect);
    f.no_effect({"vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
                 "vision_end_token_id"});
    f.note("hf_layout", "qwen3_5_vl  <- model_type qwen3_5: text model only (model.language_model.*, "
                        "lm_head); model.visual.* left out");
  } else {
    throw user_error("--model-config: model_type '", printable(out.model_type), "' in '",
                     file.string(), "' is not implemented by HLP (jet_nemotron, qwen2, qwen3_5_text, "
                     "qwen3_5 and dense qwen3_next are)");
  }
  f.reject_unread();
  out.name_or_path = root.contains("_name_or_path") && root["_name_or_path"].is_string()
                         ? root["_name_or_path"].get<std::string>()
                         : fs::absolute(file).parent_path().filename().string();
  c.name = "hf:" + out.name_or_path;
  for (const char* f_default : {"gdn_chunk"})
    out.provenance.emplace_back(f_default, std::to_string(c.gdn_chunk) + "  (HLP default)");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw user_error("--model-config '", file.string(), "': ", e.what());
  }
  out.config = c;
  return out;
}

std::string provenance_text(const HfModelConfig& hf) {
  std::ostringstream os;
  os << "# model from --model-config (" << hf.model_type << ", " << hf.name_or_path << "):\n";
  for (const auto& [field, text] : hf.provenance) os << "#   model." << field << " = " << text << "\n";
  if (!hf.no_effect.empty()) {
    os << "#   read, no effect on what HLP computes:";
    for (const auto& n : hf.no_effect) os << " " << n.substr(n.rfind(": ") + 2);
    os << "\n";
  }
  return os.str();
}

}  // namespace hlp::model::hf
