#include "model/hf/peft_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "model/config_limits.h"

using json = nlohmann::json;

namespace hlp::model::hf {

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
  if (!j.is_object()) throw user_error("--load-adapter: '", file, "' is not a JSON object");
  auto fail = [&](const std::string& what) {
    return user_error("--load-adapter: '", file, "': ", what, " is not implemented by HLP");
  };
  LoraConfig lora = base;
  try {  // json::value() and get() throw type errors for fields of another type
    if (j.value("peft_type", std::string()) != "LORA") throw fail("peft_type other than LORA");
    if (j.contains("bias") && j["bias"].is_string() && j["bias"] != "none")
      throw fail("bias " + printable(j["bias"].dump()));
    if (j.value("fan_in_fan_out", false)) throw fail("fan_in_fan_out");
    if (j.value("use_dora", false)) throw fail("use_dora");
    if (j.value("use_rslora", false)) throw fail("use_rslora (scale alpha / sqrt r)");
    for (const char* key : {"rank_pattern", "alpha_pattern"})
      if (j.contains(key) && j[key].is_object() && !j[key].empty()) throw fail(key);
    // r sizes the adapter tensors: a whole number, bounded like every model dimension (a
    // float converted to int64 out of range would be undefined).
    const json& r = j.at("r");
    if (!r.is_number_integer() || r.get<int64_t>() < 1 || r.get<int64_t>() > kMaxDimension)
      throw user_error("--load-adapter: '", file, "': r = ", printable(r.dump()),
                       " must be a whole number in [1, ", kMaxDimension, "]");
    lora.rank = r.get<int64_t>();
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
    throw user_error("--load-adapter: '", file, "' lacks r / lora_alpha / target_modules or has "
                     "a field of the wrong type: ", printable(e.what()));
  }
  lora.validate();
  return lora;
}

}  // namespace hlp::model::hf
