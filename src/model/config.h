#pragma once
// ModelConfig: the shape of a hybrid LM (Gated DeltaNet + full / sliding-window attention).
// Plain data, no LibTorch: the CLI, the accounting and the strategies read it without
// allocating anything. The math behind each field is in docs/model-math.md.
#include <cstdint>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace hlp::model {

// One letter per layer in ModelConfig::pattern.
enum class LayerKind : char {
  gated_delta = 'G',     // Gated DeltaNet linear-attention layer
  full_attention = 'A',  // causal softmax attention with RoPE + GQA
  sliding_window = 'S',  // the same attention restricted to the last `window` keys
};

// Which linear-attention layer the G letters build (docs/model-math.md, "Gated DeltaNet").
enum class GdnVariant {
  gated_deltanet,  // q, k, v each through a static causal depthwise conv (fla reference)
  jetblock,        // Jet-Nemotron: no q/k conv; v conv kernel generated per token from x
  // Qwen3.5 / Qwen3-Next (transformers' names): one in_proj_qkv and one conv1d over q | k | v,
  // in_proj_z (the output gate), in_proj_b, in_proj_a, norm, out_proj; gdn_key_heads q / k heads
  // each serving gdn_heads / gdn_key_heads value heads (gated_deltanet.h)
  qwen3_5,
  // Qwen3-Next: the same layer with in_proj_qkvz [Hk (2 dk + 2 r dv), D] and in_proj_ba
  // [Hk 2 r, D] (r = gdn_heads / gdn_key_heads) fused per key head: key head h's rows are
  // [q dk | k dk | v r dv | z r dv] and [b r | a r]; rearranged into qwen3_5's q | k | v order
  // in the forward (the conv1d, A_log, dt_bias, norm and out_proj are laid out alike)
  qwen3_next,
};

// How a Hugging Face checkpoint names what HLP holds (model/hf/names.h). `standard`: Qwen2 and
// Jet-Nemotron (model.layers.N.self_attn.*); `qwen3_5`: the G layers' mixers are
// model.layers.N.linear_attn.*; `qwen3_5_vl`: the same under model.language_model. (the
// vision-language checkpoint's text model).
enum class HfLayout { standard, qwen3_5, qwen3_5_vl };

// Which Gated DeltaNet core runs in the G layers (same math, docs/model-math.md: "The
// recurrence" and "The chunked form").
enum class GdnMode { chunked, recurrent };
inline constexpr EnumName<GdnMode> kGdnModeNames[] = {{GdnMode::chunked, "chunked"},
                                                      {GdnMode::recurrent, "recurrent"}};

GdnMode parse_gdn_mode(const std::string& text);  // "chunked" | "recurrent", else UserError
std::string to_string(GdnMode mode);

// Which implementation runs RMSNorm, SwiGLU, the G layers' gates, convolutions and chunked
// core (same math): the op-by-op reference modules; `lean`, memory-lean autograd operations
// in ATen ops that keep their inputs and recompute the rest (kernels/lean_ops.h; CPU and
// CUDA); `fused`, the fused CPU kernels of src/model/kernels/ (float32 / float64 on the CPU
// without autocast; elsewhere the reference runs). `auto` is fused on the CPU and lean on CUDA.
enum class Kernels { reference, lean, fused, automatic };
inline constexpr EnumName<Kernels> kKernelsNames[] = {{Kernels::automatic, "auto"},
                                                      {Kernels::fused, "fused"},
                                                      {Kernels::lean, "lean"},
                                                      {Kernels::reference, "reference"}};

Kernels parse_kernels(const std::string& text);  // auto | fused | lean | reference, else UserError
std::string to_string(Kernels kernels);
// `auto` resolved for tensors on a CUDA device or not; the others unchanged.
inline Kernels resolve_kernels(Kernels k, bool cuda) {
  return k != Kernels::automatic ? k : cuda ? Kernels::lean : Kernels::fused;
}

// How the loss is computed from the last hidden states: `full` materialises the [T, V] logits
// (and their gradient); `chunked` runs the head's matmul and the cross entropy over token
// chunks inside one autograd operation and never holds more than one chunk's logits.
enum class LossImpl { full, chunked };
inline constexpr EnumName<LossImpl> kLossImplNames[] = {{LossImpl::chunked, "chunked"},
                                                        {LossImpl::full, "full"}};
LossImpl parse_loss_impl(const std::string& text);  // chunked | full, else UserError
std::string to_string(LossImpl impl);
// Which kernel the A and S layers run (same math, attention.h). `automatic` ("auto") is
// resolved per device at run time: sdpa on CUDA with LibTorch >= 2, else blocked.
enum class AttnImpl {
  automatic,
  naive,    // the reference: materialises the [B, H, T, T] scores and probabilities
  blocked,  // FlashAttention-2-style tiles in LibTorch ops: O(T * block) memory (CPU default)
  sdpa,     // at::scaled_dot_product_attention (LibTorch >= 2, CUDA only)
};
inline constexpr EnumName<AttnImpl> kAttnImplNames[] = {{AttnImpl::automatic, "auto"},
                                                        {AttnImpl::naive, "naive"},
                                                        {AttnImpl::blocked, "blocked"},
                                                        {AttnImpl::sdpa, "sdpa"}};

AttnImpl parse_attn_impl(const std::string& text);  // auto | naive | blocked | sdpa, else UserError
std::string to_string(AttnImpl impl);

struct ModelConfig {
  std::string name = "custom";
  std::string pattern = "GAGS";  // layer i has kind pattern[i]

  int64_t hidden = 64;       // D
  int64_t mlp_hidden = 128;  // SwiGLU inner width
  int64_t vocab = 258;       // V

  // softmax-attention layers (A and S)
  int64_t attn_heads = 4;     // H
  int64_t attn_kv_heads = 2;  // KV heads (GQA); divides attn_heads
  int64_t attn_head_dim = 16;
  bool attn_qkv_bias = true;  // q, k, v with bias, o without (Qwen2 / Jet-Nemotron)
  // Qwen3.5 / Qwen3-Next gated attention: q_proj yields per head [query | gate] (2 head_dim
  // rows a head) and the attention output is multiplied by sigmoid(gate) before o_proj
  bool attn_output_gate = false;
  bool attn_qk_norm = false;    // per-head RMSNorm of q and k (q_norm, k_norm) before RoPE
  int64_t attn_rotary_dim = 0;  // RoPE rotates the first attn_rotary_dim dims of a head; 0 = all
  int64_t window = 16;        // S layers: query i sees keys j with i - window < j <= i
  double rope_theta = 1e6;

  // Gated DeltaNet layers (G)
  int64_t gdn_heads = 2;        // the heads the core runs (value heads)
  int64_t gdn_key_heads = 0;    // qwen3_5: q / k heads (divides gdn_heads); 0 = gdn_heads
  int64_t gdn_head_dim_k = 16;  // d_k
  int64_t gdn_head_dim_v = 32;  // d_v
  int64_t gdn_conv_width = 4;   // causal depthwise short convolution on q, k, v
  int64_t gdn_chunk = 64;       // chunk size C of the chunked core
  GdnVariant gdn_variant = GdnVariant::gated_deltanet;
  int64_t gdn_dconv_reduction = 8;  // jetblock: kernel generator width = H * dv / reduction
  GdnMode gdn_mode = GdnMode::chunked;
  double gdn_norm_eps = 1e-6;  // eps of the per-head output RMSNorm (o_norm); Jet config: 1e-5
  Kernels kernels = Kernels::automatic;
  LossImpl loss_impl = LossImpl::chunked;

  AttnImpl attn_impl = AttnImpl::automatic;  // kernel of the A and S layers (--attn-impl)

  // Sparse mixture-of-experts MLPs (Qwen3-Next; model/moe.h): moe_layers has one letter a
  // layer, 'E' where the MLP is sparse, '-' where it is the dense SwiGLU; "" = every MLP dense.
  std::string moe_layers;
  int64_t moe_experts = 0;             // E routed experts a sparse layer
  int64_t moe_top_k = 0;               // K experts a token
  int64_t moe_hidden = 0;              // each routed expert's SwiGLU width
  int64_t moe_shared_hidden = 0;       // the shared expert's SwiGLU width (0: none)
  bool moe_norm_topk = true;           // renormalise the K routing weights to sum to 1
  double moe_aux_coef = 0.0;           // router_aux_loss_coef
  bool moe_aux_loss = false;           // add moe_aux_coef x the load-balancing loss in training
  // Expert parallelism (--ep; set for one rank by the strategy, not part of the model's shape):
  // a sparse layer holds the routed experts [moe_ep_rank E / moe_ep, (moe_ep_rank + 1) E / moe_ep)
  // and reaches the others through the current ExpertShard (moe.h).
  int64_t moe_ep = 1, moe_ep_rank = 0;
  int64_t moe_local_experts() const { return moe_ep > 1 ? moe_experts / moe_ep : moe_experts; }
  int64_t moe_first_local_expert() const { return moe_ep > 1 ? moe_ep_rank * moe_local_experts() : 0; }

  double rms_eps = 1e-6;
  bool tied_embeddings = true;  // LM head = embed_tokens.weight
  // The checkpoint's RMSNorm weights w scale by (1 + w) (Qwen3.5's zero-centred norms: the
  // decoder layers' two, the final one, q_norm / k_norm; not the G layers' gated norm). HLP's
  // RMSNorm holds the factor itself: 1 + w on load (exact: transformers rounds 1 + w to float32
  // as well), w = held - 1 on save.
  bool norm_zero_centred = false;
  HfLayout hf_layout = HfLayout::standard;

  // Runtime switch, not shape: recompute each block in backward instead of storing its
  // activations (HybridLM::set_activation_checkpointing changes it after construction).
  bool activation_checkpointing = false;

  int64_t num_layers() const { return static_cast<int64_t>(pattern.size()); }
  int64_t gdn_key_head_count() const { return gdn_key_heads > 0 ? gdn_key_heads : gdn_heads; }
  int64_t attn_rotary_width() const { return attn_rotary_dim > 0 ? attn_rotary_dim : attn_head_dim; }
  LayerKind layer_kind(int64_t layer) const;
  bool is_moe_layer(int64_t layer) const {
    return !moe_layers.empty() && moe_layers[size_t(layer)] == 'E';
  }
  int64_t count_moe_layers() const;
  int64_t count_layers(LayerKind kind) const;

  // Copies with one field changed (validated): the tokenizer decides the vocab, --pattern the
  // layer stack.
  ModelConfig with_vocab(int64_t vocab_size) const;
  ModelConfig with_pattern(const std::string& new_pattern) const;

  // Throws hlp::UserError naming the bad field and what to do.
  void validate() const;

  std::string summary() const;  // one line: name, pattern, D, heads ...
};

// Presets: tiny | small | small-moe | jet-nemotron-2b | jet-nemotron-4b | gpt2-large | qwen3.5-9b |
// qwen3.5-27b | qwen3-next-80b-a3b (src/model/README.md).
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// The vocabulary a preset runs with when the data is tokenized with `tokenizer` (its name, for
// the message) of `tokenizer_vocab` ids. The presets of real models (jet-nemotron-2b / -4b,
// gpt2-large, qwen3.5-9b / -27b, qwen3-next-80b-a3b) keep their own vocabulary when the tokenizer is the model's (its ids fill the
// padded vocabulary to within 1 %, as Qwen's 151,669 ids fill Jet-Nemotron's 151,936); any other
// tokenizer's vocabulary replaces the preset's (tiny and small take the tokenizer's as theirs).
// `warning` is one line when a real model's vocabulary is replaced by a smaller tokenizer's:
// its embedding, LM head and logits are then not the real model's ("" otherwise).
struct PresetVocabulary {
  int64_t vocab = 0;
  std::string warning;
};
// --vocab: whose vocabulary sizes a preset's embedding, LM head and logits.
enum class VocabSource { tokenizer, model };
inline constexpr EnumName<VocabSource> kVocabSourceNames[] = {{VocabSource::tokenizer, "tokenizer"},
                                                              {VocabSource::model, "model"}};
VocabSource parse_vocab_source(const std::string& text);  // tokenizer | model, else UserError
std::string to_string(VocabSource source);
// source model: the preset's own vocabulary whatever the tokenizer, whose ids must fit in it
// (UserError otherwise); no warning.
PresetVocabulary preset_vocabulary(const std::string& preset_name, int64_t tokenizer_vocab,
                                   const std::string& tokenizer,
                                   VocabSource source = VocabSource::tokenizer);

// Builds the config a user asked for: preset, then optional --pattern (empty = keep), then
// --gdn-mode. The vocab is set by the caller from the tokenizer (with_vocab).
ModelConfig resolve_model_config(const std::string& preset_name, const std::string& pattern,
                                 const std::string& gdn_mode);
ModelConfig resolve_model_config(const std::string& preset_name, const std::string& pattern,
                                 GdnMode gdn_mode);

}  // namespace hlp::model
