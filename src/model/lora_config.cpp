#include "model/lora_config.h"

#include <regex>
#include <sstream>

#include "common/error.h"
#include "common/printable.h"

namespace hlp::model {
namespace {

// The target regex may come from a downloaded adapter_config.json. libstdc++'s default
// (backtracking) matcher takes exponential time on patterns such as (.*.*)*y (a hang, found by
// fuzzing: tests/fuzz/regressions/peft_config/); its polynomial mode (a GNU extension without
// back-references, which it rejects with regex_error) gives the same full-match answer in time
// linear in the name. The compiler recurses per pattern character: the length is capped.
constexpr size_t kMaxTargetsRegexBytes = 1000;

std::regex targets_pattern(const std::string& text) {
#ifdef __GLIBCXX__
  return std::regex(text, std::regex::ECMAScript | std::regex_constants::__polynomial);
#else
  return std::regex(text);
#endif
}

}  // namespace

bool name_has_suffix(const std::string& name, const std::string& suffix) {
  if (name == suffix) return true;
  if (name.size() <= suffix.size()) return false;
  return name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

std::vector<std::string> split_comma_list(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    if (first != std::string::npos) parts.push_back(item.substr(first, last - first + 1));
  }
  return parts;
}

bool LoraConfig::targets_module(const std::string& module_name) const {
  if (full_finetune()) return false;
  if (all_linear) return true;  // the caller only asks about projections
  if (!targets_regex.empty()) return std::regex_match(module_name, targets_pattern(targets_regex));
  for (const auto& t : targets)
    if (name_has_suffix(module_name, t)) return true;
  return false;
}

bool LoraConfig::saves_module(const std::string& module_name) const {
  for (const auto& m : modules_to_save)
    if (name_has_suffix(module_name, m)) return true;
  return false;
}

bool LoraConfig::saves_parameter(const std::string& param_name) const {
  for (size_t dot = param_name.find('.'); dot != std::string::npos;
       dot = param_name.find('.', dot + 1)) {
    if (saves_module(param_name.substr(0, dot))) return true;
  }
  return false;
}

void LoraConfig::validate() const {
  if (rank < 0) throw user_error("--lora-rank must be >= 0 (0 = full finetune), got ", rank);
  if (full_finetune()) return;
  if (!(alpha > 0)) throw user_error("--lora-alpha must be > 0, got ", alpha);
  if (!(dropout >= 0 && dropout < 1))
    throw user_error("--lora-dropout must be in [0, 1), got ", dropout);
  if (!all_linear && targets_regex.empty() && targets.empty())
    throw user_error("--lora-targets is empty: name modules such as q_proj,v_proj, "
                     "or give re:REGEX or all-linear");
  if (!targets_regex.empty()) {
    if (targets_regex.size() > kMaxTargetsRegexBytes)
      throw user_error("--lora-targets re:", printable(targets_regex), " is longer than ",
                       kMaxTargetsRegexBytes, " bytes");
    try {
      targets_pattern(targets_regex);
    } catch (const std::regex_error& e) {
      throw user_error("--lora-targets re:", printable(targets_regex), " is not a valid regex: ",
                       e.what());
    }
  }
}

LoraConfig make_lora_config(int64_t rank, double alpha, double dropout,
                            const std::string& targets, const std::string& modules_to_save) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.dropout = dropout;
  if (targets.rfind("re:", 0) == 0) {
    c.targets.clear();
    c.targets_regex = targets.substr(3);
  } else if (targets == "all-linear") {
    c.targets.clear();
    c.all_linear = true;
  } else {
    c.targets = split_comma_list(targets);
  }
  c.modules_to_save = split_comma_list(modules_to_save);
  c.validate();
  return c;
}

}  // namespace hlp::model
