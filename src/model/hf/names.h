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
// PEFT adapters: "base_model.model." + <HF module> + ".lora_A.weight" / ".lora_B.weight" for
// HLP's <module>.lora_A / <module>.lora_B.
#include <string>

namespace hlp::model::hf {

// HLP name (parameter or module) -> Hugging Face name; "" when no rule applies.
std::string hf_name_of(const std::string& hlp_name);
// Hugging Face name -> HLP name; "" when no rule applies.
std::string hlp_name_of(const std::string& hf_name);

// "blocks.3.mixer.q_proj.lora_A" -> "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight";
// "" for a name that is not an adapter.
std::string peft_name_of(const std::string& hlp_adapter_name);

}  // namespace hlp::model::hf
