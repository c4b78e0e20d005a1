#pragma once
// The adapter_config.json of a PEFT LoRA adapter (--load-adapter), read without LibTorch (part
// of hlp_model_config, so that a fuzzer can run it). peft.h writes adapters.
#include <string>

#include "model/lora_config.h"

namespace hlp::model::hf {

// Reads DIR/adapter_config.json: r, lora_alpha, lora_dropout, target_modules into a LoraConfig
// (modules_to_save of `base` kept). Throws UserError for a file that is not a JSON object, a
// field of the wrong type, an r outside [1, 2^20], and for peft_type other than LORA, biases,
// fan_in_fan_out, DoRA or rank patterns (not implemented).
LoraConfig read_peft_config(const std::string& dir, const LoraConfig& base);

}  // namespace hlp::model::hf
