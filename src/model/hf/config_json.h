#pragma once
// --model-config: a Hugging Face config.json of the Jet-Nemotron (model_type jet_nemotron) or
// Qwen2 (model_type qwen2) family -> HLP's ModelConfig. No LibTorch (part of hlp_model_config).
//
// Every field of the file is accounted for: it sets a ModelConfig value, is checked to have
// the one value HLP implements (hidden_act "silu", rope_scaling null, attention_dropout 0 ...),
// or is listed as having no effect on what HLP computes (token ids, torch_dtype, versions ...).
// Any other field is a UserError naming it, so nothing is silently ignored. The mapping is
// documented in docs/hf-checkpoints.md.
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace hlp::model::hf {

struct HfModelConfig {
  ModelConfig config;
  std::string model_type;        // "jet_nemotron" | "qwen2"
  std::string name_or_path;      // _name_or_path if given, else the file's directory name
  // One line per ModelConfig field: {field, "value  <- config.json: key"} or "... (HLP default)".
  std::vector<std::pair<std::string, std::string>> provenance;
  std::vector<std::string> no_effect;  // fields read and found not to change the computation
};

// `path`: a config.json file or a directory holding one. Throws UserError.
HfModelConfig read_hf_config(const std::string& path);

// The provenance as INI comment lines ("# model.hidden = 1536  <- config.json: hidden_size").
std::string provenance_text(const HfModelConfig& hf);

}  // namespace hlp::model::hf
