#include "model/lora_config.h"

#include <algorithm>
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

// Counted repetitions expand in libstdc++'s compiler: a{N} copies the atom N times, (x{N}){M}
// N M times, and a count past LONG_MAX overflows its parser (signed overflow, found by fuzzing:
// tests/fuzz/regressions/peft_config/). Every count is therefore read here first, and the number
// of atoms the pattern would expand to (counts multiplied through nested groups, alternatives
// added) is bounded before std::regex sees it.
constexpr double kMaxExpandedAtoms = 100000;

// Atoms `text` expands to from `pos` up to the ')' that closes the group (or the end); `pos`
// ends on that ')'. Literals, escapes, classes and '.' count 1; a group its contents; {m,n}
// multiplies the atom before it by its largest count (m when open-ended: the rest is a loop).
double expanded_atoms(const std::string& text, size_t& pos, int depth) {
  if (depth > 1000) return kMaxExpandedAtoms + 1;  // the length cap keeps depth below this
  double total = 0, last = 0;  // `last`: the atom a quantifier applies to
  while (pos < text.size() && text[pos] != ')') {
    const char c = text[pos];
    if (c == '\\') {
      pos += 2;
      last = 1;
    } else if (c == '[') {  // a class, with ']' first and escapes inside it
      size_t end = pos + 1;
      if (end < text.size() && text[end] == '^') ++end;
      if (end < text.size() && text[end] == ']') ++end;
      while (end < text.size() && text[end] != ']') end += text[end] == '\\' ? 2 : 1;
      pos = end + 1;
      last = 1;
    } else if (c == '(') {
      ++pos;
      last = expanded_atoms(text, pos, depth + 1);
      ++pos;  // its ')'
    } else if (c == '{') {
      double count = 0, largest = 0;
      size_t end = pos + 1;
      for (; end < text.size() && text[end] != '}'; ++end) {
        if (text[end] >= '0' && text[end] <= '9')
          count = std::min(count * 10 + (text[end] - '0'), 1e18);  // no overflow
        else
          largest = std::max(largest, count), count = 0;
      }
      largest = std::max(largest, count);
      total += last * std::max(0.0, largest - 1);  // the atom itself is counted already
      last = 0;
      pos = end + 1;
    } else if (c == '|') {
      ++pos;
      last = 0;
    } else {
      ++pos;
      last = 1;
    }
    total += last;  // 0 after a quantifier or '|': nothing new to count
    if (total > kMaxExpandedAtoms) return total;
  }
  return total;
}

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
    size_t pos = 0;
    double atoms = 0;
    while (pos < targets_regex.size()) {  // a stray ')' ends a group: go on past it
      atoms += expanded_atoms(targets_regex, pos, 0);
      ++pos;
    }
    if (atoms > kMaxExpandedAtoms)
      throw user_error("--lora-targets re:", printable(targets_regex), " repeats too much: its "
                       "counted repetitions ({n}) expand to more than ",
                       int64_t(kMaxExpandedAtoms), " atoms");
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
