#pragma once
// PEFT LoRA adapters (--save-adapter, --load-adapter) and the tables of expected tensors.
//
// A PEFT adapter directory holds
//   adapter_model.safetensors  "base_model.model.<HF module>.lora_A.weight" [r, in] and
//                              ".lora_B.weight" [out, r] (names.h maps HLP modules to HF ones)
//   adapter_config.json        peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha,
//                              lora_dropout, target_modules, bias "none", fan_in_fan_out false,
//                              base_model_name_or_path (when known), modules_to_save null
// PEFT computes y = W x + (lora_alpha / r) B A x, HLP's LoRALinear exactly.
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/hf/checkpoint.h"
#include "model/hf/peft_config.h"  // read_peft_config
#include "model/lora_config.h"

namespace hlp::model::hf {

// Every base parameter of `config` with its HF name and shape (what --init-from must hold).
std::vector<ExpectedTensor> expected_base_tensors(const ModelConfig& config);
// Every adapter factor of (config, lora) with its PEFT name and shape.
std::vector<ExpectedTensor> expected_adapter_tensors(const ModelConfig& config, const LoraConfig& lora);
// Names a checkpoint may hold without the config expecting them (lm_head.weight when tied).
std::vector<std::string> ignorable_base_tensors(const ModelConfig& config);

// Writes DIR/adapter_model.safetensors (float32) and DIR/adapter_config.json. `adapters`: the
// whole lora_A / lora_B tensors by HLP name.
void write_peft_adapter(const std::string& dir, const std::map<std::string, torch::Tensor>& adapters,
                        const ModelConfig& config, const LoraConfig& lora,
                        const std::string& base_model_name_or_path);

}  // namespace hlp::model::hf
