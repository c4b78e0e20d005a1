#pragma once
// The one table between Hugging Face parameter names (Qwen2 / Jet-Nemotron checkpoints) and
// HLP's (HybridLM::named_parameters). Prefix rules, N = layer index; the rest of the name is
// the same on both sides (q_proj.weight, A_log, dynamic_conv1d.kernel_generator.w2.bias ...):
//
//   Hugging Face                                 HLP
//   model.embed_tokens.                          embed_tokens.
//   model.norm.                                  final_norm.
//   lm_head.                                     lm_head.            (untied configs only)
//   model.layers.N.input_layernorm.              blocks.N.mixer_norm.
//   model.layers.N.post_attention_layernorm.     blocks.N.mlp_norm.
//   model.layers.N.self_attn.                    blocks.N.mixer.     (attention and JetBlock)
//   model.layers.N.mlp.                          blocks.N.mlp.
//
// Qwen3.5 (config.hf_layout): the G layers' mixers are model.layers.N.linear_attn. (qwen3_5),
// and the vision-language checkpoint holds the text model under model.language_model.
// (qwen3_5_vl: model.language_model.embed_tokens., .norm., .layers.N.; lm_head. stays).
//
// PEFT adapters: "base_model.model." + <HF module> + ".lora_A.weight" / ".lora_B.weight" for
// HLP's <module>.lora_A / <module>.lora_B.
#include <string>

#include "model/config.h"

namespace hlp::model::hf {

// HLP name (parameter or module) -> Hugging Face name; "" when no rule applies.
std::string hf_name_of(const std::string& hlp_name);
// Hugging Face name -> HLP name; "" when no rule applies.
std::string hlp_name_of(const std::string& hf_name);

// "blocks.3.mixer.q_proj.lora_A" -> "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight";
// "" for a name that is not an adapter.
std::string peft_name_of(const std::string& hlp_adapter_name);

// The same for a model whose checkpoint layout is config.hf_layout (the names above for
// `standard`).
std::string hf_name_of(const std::string& hlp_name, const ModelConfig& config);
std::string peft_name_of(const std::string& hlp_adapter_name, const ModelConfig& config);

// What HLP holds is the checkpoint's value + this (1 for Qwen3.5's zero-centred RMSNorm
// weights, config.norm_zero_centred; else 0).
double hf_value_offset(const std::string& hlp_name, const ModelConfig& config);

}  // namespace hlp::model::hf
