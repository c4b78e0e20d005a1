#include "model/hf/peft.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/printable.h"
#include "model/accounting.h"
#include "model/hf/names.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace hlp::model::hf {

std::vector<ExpectedTensor> expected_base_tensors(const ModelConfig& config) {
  std::vector<ExpectedTensor> out;
  for (const auto& p : parameter_table(config, LoraConfig::none()))
    out.push_back({hf_name_of(p.name), p.name, p.shape});
  return out;
}

std::vector<ExpectedTensor> expected_adapter_tensors(const ModelConfig& config,
                                                     const LoraConfig& lora) {
  std::vector<ExpectedTensor> out;
  for (const auto& p : parameter_table(config, lora))
    if (p.adapter) out.push_back({peft_name_of(p.name), p.name, p.shape});
  return out;
}

std::vector<std::string> ignorable_base_tensors(const ModelConfig& config) {
  if (config.tied_embeddings) return {"lm_head.weight"};
  return {};
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
    const std::string peft = peft_name_of(name);
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

LoraConfig read_peft_config(const std::string& dir, const LoraConfig& base) {
  const std::string file = dir + "/adapter_config.json";
  std::ifstream in(file);
  if (!in) throw user_error("--load-adapter: cannot read '", file, "'");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    throw user_error("--load-adapter: '", file, "' is not JSON: ", printable(e.what()));
  }
  auto fail = [&](const std::string& what) {
    return user_error("--load-adapter: '", file, "': ", what, " is not implemented by HLP");
  };
  if (j.value("peft_type", std::string()) != "LORA") throw fail("peft_type other than LORA");
  if (j.contains("bias") && j["bias"].is_string() && j["bias"] != "none")
    throw fail("bias " + printable(j["bias"].dump()));
  if (j.value("fan_in_fan_out", false)) throw fail("fan_in_fan_out");
  if (j.value("use_dora", false)) throw fail("use_dora");
  if (j.value("use_rslora", false)) throw fail("use_rslora (scale alpha / sqrt r)");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && j[key].is_object() && !j[key].empty()) throw fail(key);
  LoraConfig lora = base;
  try {
    lora.rank = j.at("r").get<int64_t>();
    lora.alpha = j.at("lora_alpha").get<double>();
    lora.dropout = j.value("lora_dropout", 0.0);
    const json& t = j.at("target_modules");
    lora.targets_regex.clear();
    lora.all_linear = false;
    if (t.is_string()) {
      const auto s = t.get<std::string>();
      if (s == "all-linear") lora.all_linear = true;
      else lora.targets_regex = s;  // PEFT: a string is a full-match regex (on HF names)
    } else {
      lora.targets = t.get<std::vector<std::string>>();
    }
  } catch (const json::exception& e) {
    throw user_error("--load-adapter: '", file, "' lacks r / lora_alpha / target_modules: ",
                     printable(e.what()));
  }
  lora.validate();
  return lora;
}

}  // namespace hlp::model::hf
