#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/error.h"
#include "model/accounting.h"
#include "model/config_limits.h"

namespace hlp::model {

GdnMode parse_gdn_mode(const std::string& text) {
  return parse_enum("gdn-mode", text, kGdnModeNames);
}
std::string to_string(GdnMode mode) { return enum_name(mode, kGdnModeNames); }

Kernels parse_kernels(const std::string& text) {
  return parse_enum("kernels", text, kKernelsNames);
}
std::string to_string(Kernels kernels) { return enum_name(kernels, kKernelsNames); }

LossImpl parse_loss_impl(const std::string& text) {
  return parse_enum("loss-impl", text, kLossImplNames);
}
std::string to_string(LossImpl impl) { return enum_name(impl, kLossImplNames); }

AttnImpl parse_attn_impl(const std::string& text) {
  return parse_enum("attn-impl", text, kAttnImplNames);
}
std::string to_string(AttnImpl impl) { return enum_name(impl, kAttnImplNames); }

LayerKind ModelConfig::layer_kind(int64_t layer) const {
  return static_cast<LayerKind>(pattern.at(static_cast<size_t>(layer)));
}

int64_t ModelConfig::count_layers(LayerKind kind) const {
  return std::count(pattern.begin(), pattern.end(), static_cast<char>(kind));
}

ModelConfig ModelConfig::with_vocab(int64_t vocab_size) const {
  ModelConfig copy = *this;
  copy.vocab = vocab_size;
  copy.validate();
  return copy;
}

ModelConfig ModelConfig::with_pattern(const std::string& new_pattern) const {
  ModelConfig copy = *this;
  copy.pattern = new_pattern;
  copy.validate();
  return copy;
}

namespace {

// Every size a tensor is built from or that divides another size: zero would divide by zero
// later, and a huge one overflow the parameter arithmetic or the memory (config_limits.h).
void require_size(int64_t value, const char* field) {
  if (value < 1 || value > kMaxDimension)
    throw user_error("model config: ", field, " must be in [1, ", kMaxDimension, "], got ", value);
}

void require_positive_finite(double value, const char* field) {
  if (!(value > 0) || !std::isfinite(value))
    throw user_error("model config: ", field, " must be a finite number > 0, got ", value);
}

// The parameters' fp32 bytes in closed form (the accounting's table: nothing is allocated),
// summed with overflow checks: an absurd layer count or width is refused here, before the
// model is built, instead of being found by the OOM killer minutes later.
void require_parameter_bytes_within_limit(const ModelConfig& c) {
  int64_t parameters = 0, bytes = 0;
  bool overflow = false;
  for (const auto& p : parameter_table(c, LoraConfig::none()))
    if (__builtin_add_overflow(parameters, p.numel, &parameters)) {
      overflow = true;
      break;
    }
  if (!overflow) overflow = __builtin_mul_overflow(parameters, int64_t(sizeof(float)), &bytes);
  if (overflow || bytes > kMaxParameterBytes) {
    std::ostringstream count;
    if (overflow) count << "more than 2^61 parameters";
    else count << parameters << " parameters (" << bytes << " bytes in fp32)";
    throw user_error("model config: ", count.str(), " exceed HLP's limit of 2^40 bytes (1 TiB) of "
                     "parameters (", c.num_layers(), " layers, hidden ", c.hidden, ", mlp_hidden ",
                     c.mlp_hidden, ", vocab ", c.vocab, "); check the layer count and widths");
  }
}

}  // namespace

void ModelConfig::validate() const {
  if (pattern.empty())
    throw user_error("model config: empty layer pattern: give one letter per layer, e.g. GGAGS "
                     "(G gated delta, A full attention, S sliding window)");
  if (num_layers() > kMaxLayers)
    throw user_error("model config: ", num_layers(), " layers exceed HLP's limit of ", kMaxLayers);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != 'G' && c != 'A' && c != 'S')
      throw user_error("model config: layer pattern '", pattern, "' has '", c, "' at position ",
                       i, ": use only G (gated delta), A (full attention), S (sliding window)");
  }
  require_size(hidden, "hidden");
  require_size(mlp_hidden, "mlp_hidden");
  require_size(vocab, "vocab");
  require_positive_finite(rms_eps, "rms_eps");
  const bool has_attention = count_layers(LayerKind::full_attention) +
                                 count_layers(LayerKind::sliding_window) > 0;
  if (has_attention) {
    require_size(attn_heads, "attn_heads");
    require_size(attn_kv_heads, "attn_kv_heads");
    require_size(attn_head_dim, "attn_head_dim");
    if (attn_heads % attn_kv_heads != 0)
      throw user_error("model config: attn_kv_heads ", attn_kv_heads,
                       " does not divide attn_heads ", attn_heads,
                       " (GQA needs a whole number of query heads per KV head)");
    if (attn_head_dim % 2 != 0)
      throw user_error("model config: attn_head_dim ", attn_head_dim,
                       " must be even (RoPE rotates pairs of channels)");
    require_positive_finite(rope_theta, "rope_theta");
    if (attn_rotary_dim < 0 || attn_rotary_dim > attn_head_dim || attn_rotary_dim % 2 != 0)
      throw user_error("model config: attn_rotary_dim ", attn_rotary_dim,
                       " must be even and in [0, attn_head_dim ", attn_head_dim,
                       "] (0: RoPE over the whole head)");
  }
  if (count_layers(LayerKind::sliding_window) > 0) require_size(window, "window");
  if (count_layers(LayerKind::gated_delta) > 0) {
    require_size(gdn_heads, "gdn_heads");
    require_size(gdn_head_dim_k, "gdn_head_dim_k");
    require_size(gdn_head_dim_v, "gdn_head_dim_v");
    require_size(gdn_conv_width, "gdn_conv_width");
    require_size(gdn_chunk, "gdn_chunk");
    require_size(gdn_dconv_reduction, "gdn_dconv_reduction");
    if (gdn_variant == GdnVariant::jetblock && gdn_heads * gdn_head_dim_v / gdn_dconv_reduction < 1)
      throw user_error("model config: gdn_dconv_reduction ", gdn_dconv_reduction,
                       " leaves no kernel-generator width (gdn_heads * gdn_head_dim_v = ",
                       gdn_heads * gdn_head_dim_v, ")");
    require_positive_finite(gdn_norm_eps, "gdn_norm_eps");
    if (gdn_key_heads < 0 || (gdn_key_heads > 0 && gdn_heads % gdn_key_heads != 0))
      throw user_error("model config: gdn_key_heads ", gdn_key_heads, " does not divide gdn_heads ",
                       gdn_heads, " (each q / k head serves a whole number of value heads)");
    if (gdn_key_heads > 0 && gdn_key_heads != gdn_heads && gdn_variant != GdnVariant::qwen3_5 &&
        gdn_variant != GdnVariant::qwen3_next)
      throw user_error("model config: gdn_key_heads ", gdn_key_heads, " != gdn_heads ", gdn_heads,
                       " needs gdn_variant qwen3_5 or qwen3_next (the others have one head count)");
  }
  if (!moe_layers.empty()) {
    if (int64_t(moe_layers.size()) != num_layers())
      throw user_error("model config: moe_layers has ", moe_layers.size(), " letters but the model ",
                       num_layers(), " layers");
    for (char k : moe_layers)
      if (k != 'E' && k != '-')
        throw user_error("model config: moe_layers '", moe_layers, "' has '", k,
                         "': use E (sparse) or - (dense) a layer");
    if (count_moe_layers() > 0) {
      require_size(moe_experts, "moe_experts (num_experts)");
      require_size(moe_hidden, "moe_hidden (moe_intermediate_size)");
      if (moe_top_k < 1 || moe_top_k > moe_experts)
        throw user_error("model config: moe_top_k (num_experts_per_tok) ", moe_top_k,
                         " must be between 1 and the ", moe_experts, " experts");
      if (moe_shared_hidden < 0)
        throw user_error("model config: moe_shared_hidden ", moe_shared_hidden, " is negative");
      if (!std::isfinite(moe_aux_coef) || moe_aux_coef < 0)
        throw user_error("model config: moe_aux_coef (router_aux_loss_coef) ", moe_aux_coef,
                         " must be a finite number >= 0");
    }
  }
  require_parameter_bytes_within_limit(*this);
}

int64_t ModelConfig::count_moe_layers() const {
  int64_t n = 0;
  for (char k : moe_layers) n += k == 'E';
  return n;
}

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << name << " pattern=" << pattern << " layers=" << num_layers() << " hidden=" << hidden
     << " mlp=" << mlp_hidden << " vocab=" << vocab << " attn=" << attn_heads << "/"
     << attn_kv_heads << "x" << attn_head_dim << " window=" << window << " gdn=" << gdn_heads
     << "x(" << gdn_head_dim_k << "," << gdn_head_dim_v << ") gdn_variant="
     << (gdn_variant == GdnVariant::jetblock     ? "jetblock"
         : gdn_variant == GdnVariant::qwen3_5    ? "qwen3_5"
         : gdn_variant == GdnVariant::qwen3_next ? "qwen3_next"
                                                 : "gated_deltanet")
     << " gdn_mode=" << to_string(gdn_mode) << " kernels=" << to_string(kernels)
     << " attn_impl=" << to_string(attn_impl);
  // the Qwen3.5 fields, only where they differ from the other families'
  if (gdn_key_head_count() != gdn_heads) os << " gdn_key_heads=" << gdn_key_heads;
  if (attn_output_gate) os << " attn_output_gate=1";
  if (attn_qk_norm) os << " attn_qk_norm=1";
  if (attn_rotary_width() != attn_head_dim) os << " attn_rotary_dim=" << attn_rotary_dim;
  if (norm_zero_centred) os << " norm_zero_centred=1";
  if (count_moe_layers() > 0)
    os << " moe=" << moe_layers << " experts=" << moe_experts << " top_k=" << moe_top_k
       << " moe_hidden=" << moe_hidden << " shared=" << moe_shared_hidden;
  return os.str();
}

namespace {

// What the Qwen3.5 and Qwen3-Next presets share (their config.json's common values): gated
// attention without biases, q / k norms, rope_theta 1e7, conv width 4, eps 1e-6, untied, the
// zero-centred (1 + w) norms.
void set_qwen3_hybrid_common(ModelConfig& c) {
  c.attn_qkv_bias = false;
  c.attn_output_gate = true;
  c.attn_qk_norm = true;
  c.rope_theta = 1e7;
  c.gdn_conv_width = 4;
  c.gdn_norm_eps = 1e-6;
  c.rms_eps = 1e-6;
  c.tied_embeddings = false;
  c.norm_zero_centred = true;
}

}  // namespace

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  c.name = name;
  if (name == "tiny") {
    // Defaults of ModelConfig: d 64, 4 layers, byte vocab. Unit tests and the loss test.
  } else if (name == "small") {
    // ~16 M parameters with a 4096-token vocab: a CPU demo with a Jet-like stack (mostly G,
    // attention and sliding window in the second half).
    c.pattern = "GGGGGGAGGASG";
    c.hidden = 256;
    c.mlp_hidden = 768;
    c.vocab = 4096;
    c.attn_heads = 4;
    c.attn_kv_heads = 2;
    c.attn_head_dim = 64;
    c.window = 256;
    c.gdn_heads = 4;
    c.gdn_head_dim_k = 48;
    c.gdn_head_dim_v = 128;
    c.gdn_variant = GdnVariant::jetblock;
  } else if (name == "jet-nemotron-2b") {
    c.pattern = "GGGGGGGGGGGGGGAGGGGASSGGGGGG";  // A at 14, 19; S at 20, 21
    c.hidden = 1536;
    c.mlp_hidden = 8960;
    c.vocab = 151936;
    c.attn_heads = 12;
    c.attn_kv_heads = 2;
    c.attn_head_dim = 128;
    c.window = 1152;
    c.gdn_heads = 12;
    c.gdn_head_dim_k = 96;
    c.gdn_head_dim_v = 256;
    c.gdn_variant = GdnVariant::jetblock;  // 1.965 B parameters (published: about 1.97 B)
  } else if (name == "jet-nemotron-4b") {
    std::string p(36, 'G');
    for (int i : {17, 20, 32}) p[i] = 'A';
    for (int i : {5, 16, 19, 21, 22, 25, 27}) p[i] = 'S';
    c.pattern = p;
    c.hidden = 2048;
    c.mlp_hidden = 11008;
    c.vocab = 151936;
    c.attn_heads = 16;
    c.attn_kv_heads = 2;
    c.attn_head_dim = 128;
    c.window = 2048;
    c.gdn_heads = 16;
    c.gdn_head_dim_k = 128;
    c.gdn_head_dim_v = 256;
    c.gdn_variant = GdnVariant::jetblock;
  } else if (name == "gpt2-large") {
    // The all-attention control (774 M). Mapped onto this block family (README.md): RMSNorm
    // for LayerNorm, RoPE for learned positions, SwiGLU of width 3413 ~ 8/3 d for the 4d GELU
    // MLP so that the parameter count and FLOPs per token stay within 0.3 %.
    c.pattern = std::string(36, 'A');
    c.hidden = 1280;
    c.mlp_hidden = 3413;
    c.vocab = 50257;
    c.attn_heads = 20;
    c.attn_kv_heads = 20;
    c.attn_head_dim = 64;
    c.window = 1024;
    c.rope_theta = 1e4;
    c.gdn_heads = 20;  // only used if --pattern adds G layers
    c.gdn_head_dim_k = 64;
    c.gdn_head_dim_v = 64;
  } else if (name == "qwen3.5-27b" || name == "qwen3.5-9b") {
    // The text models of Qwen/Qwen3.5-27B and Qwen/Qwen3.5-9B (their config.json's text_config,
    // src/model/README.md): three Gated DeltaNet layers to one gated full attention
    // (full_attention_interval 4); LoRA-finetuned dense.
    const bool big = name == "qwen3.5-27b";
    set_qwen3_hybrid_common(c);
    c.pattern.clear();
    for (int i = 0; i < (big ? 16 : 8); ++i) c.pattern += "GGGA";
    c.hidden = big ? 5120 : 4096;
    c.mlp_hidden = big ? 17408 : 12288;
    c.vocab = 248320;
    c.attn_heads = big ? 24 : 16;
    c.attn_kv_heads = 4;
    c.attn_head_dim = 256;
    c.attn_rotary_dim = 64;  // partial_rotary_factor 0.25
    c.gdn_variant = GdnVariant::qwen3_5;
    c.gdn_key_heads = 16;
    c.gdn_heads = big ? 48 : 32;
    c.gdn_head_dim_k = 128;
    c.gdn_head_dim_v = 128;
    c.hf_layout = HfLayout::qwen3_5_vl;  // the published checkpoints are vision-language ones
  } else if (name == "qwen3-next-80b-a3b" || name == "small-moe") {
    // qwen3-next-80b-a3b: Qwen/Qwen3-Next-80B-A3B (transformers' Qwen3NextConfig defaults, which
    // its docstring names as that checkpoint's; src/model/README.md): 48 layers GGGA, every MLP
    // sparse, 512 experts of 512 with 10 a token and a shared expert of 512. small-moe: the same
    // layer kinds at CPU scale (the expert-parallel benchmark's model).
    const bool big = name == "qwen3-next-80b-a3b";
    set_qwen3_hybrid_common(c);
    c.pattern.clear();
    for (int i = 0; i < (big ? 12 : 2); ++i) c.pattern += "GGGA";
    c.hidden = big ? 2048 : 256;
    c.mlp_hidden = big ? 5120 : 512;  // no dense MLP: every layer is sparse
    c.vocab = big ? 151936 : 4096;
    c.attn_heads = big ? 16 : 4;
    c.attn_kv_heads = 2;
    c.attn_head_dim = big ? 256 : 64;
    c.attn_rotary_dim = c.attn_head_dim / 4;  // partial_rotary_factor 0.25
    c.gdn_variant = GdnVariant::qwen3_next;
    c.gdn_key_heads = big ? 16 : 4;
    c.gdn_heads = big ? 32 : 8;
    c.gdn_head_dim_k = big ? 128 : 32;
    c.gdn_head_dim_v = big ? 128 : 32;
    c.moe_layers = std::string(c.pattern.size(), 'E');
    c.moe_experts = big ? 512 : 16;
    c.moe_top_k = big ? 10 : 4;
    c.moe_hidden = big ? 512 : 128;
    c.moe_shared_hidden = big ? 512 : 256;
    c.moe_norm_topk = true;
    c.moe_aux_coef = 0.001;
  } else {
    std::ostringstream names;
    for (const auto& n : preset_names()) names << " " << n;
    throw user_error("--model '", name, "' is not a preset: use one of", names.str());
  }
  c.validate();
  return c;
}

VocabSource parse_vocab_source(const std::string& text) {
  return parse_enum("vocab", text, kVocabSourceNames);
}
std::string to_string(VocabSource source) { return enum_name(source, kVocabSourceNames); }

PresetVocabulary preset_vocabulary(const std::string& preset_name, int64_t tokenizer_vocab,
                                   const std::string& tokenizer, VocabSource source) {
  const ModelConfig c = preset(preset_name);
  if (source == VocabSource::model) {
    if (tokenizer_vocab > c.vocab)
      throw user_error("--vocab model: --tokenizer ", tokenizer, " has ", tokenizer_vocab,
                       " ids, more than --model ", preset_name, "'s ", c.vocab,
                       "; use --vocab tokenizer or a smaller tokenizer");
    return {c.vocab, ""};
  }
  const bool real = preset_name == "jet-nemotron-2b" || preset_name == "jet-nemotron-4b" ||
                    preset_name == "gpt2-large" || preset_name.rfind("qwen3.5-", 0) == 0 ||
                    preset_name == "qwen3-next-80b-a3b";
  PresetVocabulary v{tokenizer_vocab, ""};
  if (!real || tokenizer_vocab > c.vocab) return v;
  if (tokenizer_vocab * 100 >= c.vocab * 99) {  // the model's own tokenizer: its padded vocab
    v.vocab = c.vocab;
    return v;
  }
  const double lost = double(c.vocab - tokenizer_vocab) * double(c.hidden) *
                      (c.tied_embeddings ? 1.0 : 2.0) / 1e6;
  std::ostringstream os;
  os << "--model " << preset_name << " has a vocabulary of " << c.vocab << " ids but --tokenizer "
     << tokenizer << " has " << tokenizer_vocab << ": the embedding and LM head shrink to "
     << tokenizer_vocab << " rows (" << std::fixed << std::setprecision(1) << lost
     << " M parameters fewer) and the logits to " << tokenizer_vocab
     << " columns, so memory and time are not the real model's; use the model's tokenizer"
     << (preset_name.rfind("jet-nemotron", 0) == 0 || preset_name == "qwen3-next-80b-a3b"
             ? " (--tokenizer build/datasets/qwen3/tokenizer.json, shipped)"
             : "")
     << ", or --vocab model to keep its " << c.vocab << " rows with this tokenizer's ids";
  v.warning = os.str();
  return v;
}

std::vector<std::string> preset_names() {
  return {"tiny",        "small",       "small-moe",         "jet-nemotron-2b", "jet-nemotron-4b",
          "gpt2-large",  "qwen3.5-9b",  "qwen3.5-27b",       "qwen3-next-80b-a3b"};
}

ModelConfig resolve_model_config(const std::string& preset_name, const std::string& pattern,
                                 const std::string& gdn_mode) {
  ModelConfig c = preset(preset_name);
  if (!pattern.empty()) c = c.with_pattern(pattern);
  if (!gdn_mode.empty()) c.gdn_mode = parse_gdn_mode(gdn_mode);
  return c;
}

ModelConfig resolve_model_config(const std::string& preset_name, const std::string& pattern,
                                 GdnMode gdn_mode) {
  ModelConfig c = resolve_model_config(preset_name, pattern, "");
  c.gdn_mode = gdn_mode;
  return c;
}

}  // namespace hlp::model
