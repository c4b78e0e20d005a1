#include "model/hf/peft.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "model/accounting.h"
#include "model/hf/names.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace hlp::model::hf {

std::vector<ExpectedTensor> expected_base_tensors(const ModelConfig& config) {
  std::vector<ExpectedTensor> out;
  for (const auto& p : parameter_table(config, LoraConfig::none()))
    out.push_back({hf_name_of(p.name, config), p.name, p.shape, hf_value_offset(p.name, config)});
  return out;
}

std::vector<ExpectedTensor> expected_adapter_tensors(const ModelConfig& config,
                                                     const LoraConfig& lora) {
  std::vector<ExpectedTensor> out;
  for (const auto& p : parameter_table(config, lora))
    if (p.adapter) out.push_back({peft_name_of(p.name, config), p.name, p.shape});
  return out;
}

std::vector<std::string> ignorable_base_tensors(const ModelConfig& config) {
  std::vector<std::string> out;
  if (config.tied_embeddings) out.push_back("lm_head.weight");
  if (config.hf_layout == HfLayout::qwen3_5_vl) out.push_back("model.visual.*");  // vision tower
  if (config.hf_layout != HfLayout::standard) out.push_back("mtp.*");  // multi-token prediction
  return out;
}

namespace {

// PEFT's target_modules: the distinct last components of the adapted modules ("q_proj", ...).
std::vector<std::string> target_leaf_names(const ModelConfig& config, const LoraConfig& lora) {
  std::set<std::string> leaves;
  for (const auto& lin : linear_table(config))
    if (lora.targets_module(lin.module)) leaves.insert(lin.module.substr(lin.module.rfind('.') + 1));
  return {leaves.begin(), leaves.end()};
}

}  // namespace

void write_peft_adapter(const std::string& dir, const std::map<std::string, torch::Tensor>& adapters,
                        const ModelConfig& config, const LoraConfig& lora,
                        const std::string& base_model_name_or_path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw user_error("--save-adapter: cannot create '", dir, "': ", ec.message());
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : adapters) {
    const std::string peft = peft_name_of(name, config);
    if (peft.empty()) throw user_error("internal: '", name, "' has no PEFT name");
    tensors.emplace_back(peft, t.to(torch::kFloat));
  }
  write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"r", lora.rank},
              {"lora_alpha", lora.alpha},
              {"lora_dropout", lora.dropout},
              {"target_modules", target_leaf_names(config, lora)},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"inference_mode", false},
              {"use_dora", false},
              {"use_rslora", false},
              {"init_lora_weights", true},
              {"modules_to_save", nullptr},
              {"base_model_name_or_path",
               base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path)}};
  std::ofstream out(dir + "/adapter_config.json.tmp");
  out << cfg.dump(2) << "\n";
  if (!out) throw user_error("--save-adapter: cannot write '", dir, "/adapter_config.json'");
  out.close();
  fs::rename(dir + "/adapter_config.json.tmp", dir + "/adapter_config.json");
}

}  // namespace hlp::model::hf
