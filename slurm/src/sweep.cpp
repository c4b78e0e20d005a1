#include "sweep.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <tuple>
#include <set>
#include <sstream>

#include "common/error.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "parallel/registry.h"
#include "train_options.h"

namespace hlp::sweep {
namespace {

std::string sanitize(const std::string& value) {
  std::string out;
  for (char c : value) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

bool is_true(const std::string& v) { return v == "true" || v == "1" || v == "yes" || v == "on"; }

// More would not fit a Slurm job array (MaxArraySize is 1001 by default) nor a report; the
// largest sweep of jobs/ expands to 240. Checked before expanding: axes multiply.
constexpr uint64_t kMaxConfigurations = 10000;
// Ranks, tp and pp: a world beyond this is a typo (and tp * pp stays far from overflow).
constexpr long kMaxRanks = 1 << 20;

// `key` of a configuration as a count (ranks, tp, pp), `fallback` when unset. The job file's
// values were checked against hlp-train's options, but one declared by train-options was not.
int as_count(const std::string& key, const std::string& value, int fallback, const std::string& path) {
  if (value.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (end != value.c_str() + value.size() || errno != 0 || v < 0 || v > kMaxRanks)
    throw user_error(path, ": '", key, " = ", value, "' is not a whole number in [0, ", kMaxRanks, "]");
  return static_cast<int>(v);
}

// One swept axis's contribution to a configuration name: "t256", "m4", "uniform", "ac".
std::string name_token(const std::string& axis, const std::string& value) {
  const TrainOption* option = find_train_option(axis);
  if (!option) return sanitize(axis) + "-" + sanitize(value);  // declared via train-options
  if (option->kind == ValueKind::flag) return (is_true(value) ? "" : "no") + option->short_name;
  return option->short_name + sanitize(value);
}

}  // namespace

std::string Config::value(const std::string& key) const {
  for (const KeyValue& kv : options)
    if (kv.key == key) return kv.value;
  return "";
}

Sweep expand_sweep(const JobFile& job) {
  Sweep sweep;
  std::string stem = std::filesystem::path(job.path).stem().string();
  sweep.name = job.setting("", "name", stem);
  if (sweep.name.empty() || sanitize(sweep.name) != sweep.name)
    throw user_error(job.path, ": 'name = ", sweep.name, "' must be a plain word (letters, digits, - _ .)");

  bool has_strategy = false;
  for (const KeyValue& kv : job.fixed) has_strategy = has_strategy || kv.key == "strategy";
  for (const Axis& axis : job.axes) has_strategy = has_strategy || axis.name == "strategy";
  if (!has_strategy)
    throw user_error(job.path, ": no strategy; set 'strategy = ...' in [fixed] or sweep it in [sweep]");

  uint64_t combinations = 1;
  for (const Axis& axis : job.axes)
    if (__builtin_mul_overflow(combinations, uint64_t(axis.values.size()), &combinations) ||
        combinations > kMaxConfigurations)
      throw user_error(job.path, ": the axes of [sweep] multiply to more than ", kMaxConfigurations,
                       " configurations (before exclude rules); split the sweep into several files");

  // Odometer over the axes: index[0] (the first axis) changes slowest.
  std::vector<size_t> index(job.axes.size(), 0);
  std::set<std::string> names;
  for (bool done = false; !done;) {
    Config config;
    std::map<std::string, std::string> values;
    for (const KeyValue& kv : job.fixed) values[kv.key] = kv.value;
    for (size_t a = 0; a < job.axes.size(); ++a) values[job.axes[a].name] = job.axes[a].values[index[a]];

    // hlp-train options in file order: fixed first, then swept.
    for (const KeyValue& kv : job.fixed)
      if (kv.key != "ranks") config.options.push_back(kv);
    for (size_t a = 0; a < job.axes.size(); ++a)
      if (job.axes[a].name != "ranks") config.options.push_back({job.axes[a].name, values[job.axes[a].name]});

    OptionLookup lookup = [&](const std::string& name) -> std::optional<std::string> {
      auto it = values.find(name);
      if (it != values.end()) return it->second;
      if (name == "tp" || name == "pp" || name == "cp" || name == "ep" || name == "ranks")
        return std::string("1");
      return std::nullopt;
    };
    auto get = [&](const std::string& key) {
      auto it = values.find(key);  // not values[key]: that would insert "" and hide the default
      return it == values.end() ? std::string() : it->second;
    };
    config.ranks = as_count("ranks", get("ranks"), 1, job.path);
    // The strategy as hlp-train will run it (the registry's defaults fill a pp / tp / cp
    // strategy's own axis), named as hlp-train names it in the result file.
    parallel::StrategySpec spec;
    try {
      spec.strategy = parallel::parse_strategy(get("strategy"));
    } catch (const UserError& e) {
      throw user_error(job.path, ": ", e.what());
    }
    spec.tp = as_count("tp", get("tp"), 1, job.path);
    spec.pp = as_count("pp", get("pp"), 1, job.path);
    spec.cp = as_count("cp", get("cp"), 1, job.path);
    spec.ep = as_count("ep", get("ep"), 1, job.path);
    const std::optional<parallel::MeshAxis> own_axis = parallel::strategy_entry(spec.strategy).axis;
    spec = parallel::with_defaults(spec, config.ranks);

    // Name: composite strategy, ranks, then every other swept axis in file order.
    config.name = spec.name();
    config.label = config.name + " n=" + std::to_string(config.ranks);
    config.name += "-n" + std::to_string(config.ranks);
    for (const Axis& axis : job.axes) {
      const std::string v = get(axis.name);
      if (axis.name == "strategy" || axis.name == "ranks") continue;
      bool in_composite = false;  // a model-parallel size is in the composite name already
      for (const auto& a : parallel::axis_entries())
        in_composite = in_composite || (axis.name == a.name && own_axis != a.axis);
      if (in_composite) continue;
      config.name += "-" + name_token(axis.name, v);
      config.label += " " + axis.name + "=" + v;
    }

    bool excluded = false;
    for (const ExcludeRule& rule : job.excludes) excluded = excluded || rule.matches(lookup);
    if (excluded) {
      ++sweep.excluded;
    } else {
      // Impossible combinations that no exclude rule removed (the registry's rules).
      std::string why;
      try {
        parallel::check_composition(spec);
        parallel::check_world(spec, config.ranks);
      } catch (const UserError& e) {
        why = e.what();
      }
      if (!why.empty()) {
        const char* hint = spec.strategy == parallel::StrategyKind::single
                               ? "add 'exclude = strategy=single & ranks!=1' to [sweep]"
                               : "add 'exclude = ranks % (tp*pp*cp) != 0' (or a rule for the "
                                 "combination) to [sweep]";
        throw user_error(job.path, ": configuration '", config.name, "' is impossible: ", why,
                         "; ", hint);
      }
      if (!names.insert(config.name).second)
        throw user_error(job.path, ": two configurations are both named '", config.name,
                         "'; give the axes distinct values");
      sweep.configs.push_back(config);
    }

    size_t a = job.axes.size();
    for (;;) {
      if (a == 0) { done = true; break; }
      --a;
      if (++index[a] < job.axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  if (sweep.configs.empty())
    throw user_error(job.path, ": every one of the ", sweep.excluded,
                     " configurations is excluded by the rules; nothing to run");

  group_shapes(sweep);
  return sweep;
}

std::vector<std::string> vocabulary_warnings(const Sweep& sweep) {
  // (model, tokenizer, vocab source) -> the configurations with it
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::string>> configs;
  for (const Config& c : sweep.configs) {
    const std::string model = c.value("model");
    const std::string tokenizer = c.value("tokenizer");
    const std::string source = c.value("vocab");
    if (!model.empty() && c.value("model-config").empty())  // a checkpoint's vocabulary rules
      configs[{model, tokenizer.empty() ? "byte" : tokenizer, source.empty() ? "tokenizer" : source}]
          .push_back(c.name);
  }
  std::vector<std::string> warnings;
  for (const auto& [key, names] : configs) {
    const auto& [model_name, tokenizer, source] = key;
    int64_t vocab = 0;
    std::string warning;
    try {
      vocab = data::make_tokenizer(tokenizer)->vocab_size();
      warning = model::preset_vocabulary(model_name, vocab, tokenizer,
                                         model::parse_vocab_source(source)).warning;
    } catch (const UserError&) {
      continue;  // unreadable here (e.g. a path of the cluster), or refused: hlp-train says so
    }
    if (warning.empty()) continue;
    warnings.push_back(std::to_string(names.size()) + " configuration(s) (" + names.front() +
                       (names.size() > 1 ? ", ..." : "") + "): " + warning);
  }
  return warnings;
}

void group_shapes(Sweep& sweep) {
  std::map<int, Shape> by_ranks;
  for (size_t i = 0; i < sweep.configs.size(); ++i) {
    Shape& shape = by_ranks[sweep.configs[i].ranks];
    shape.ranks = sweep.configs[i].ranks;
    shape.name = sweep.name + "-n" + std::to_string(shape.ranks);
    shape.config_indices.push_back(static_cast<int>(i));
  }
  sweep.shapes.clear();
  for (auto& [ranks, shape] : by_ranks) sweep.shapes.push_back(shape);
}

std::string config_ini(const Sweep& sweep, const Config& config, const std::string& job_path) {
  std::ostringstream os;
  os << "# hlp-train configuration '" << config.name << "' of sweep '" << sweep.name << "'\n"
     << "# rendered by hlp-sweep from " << job_path << "; run with " << config.ranks
     << (config.ranks == 1 ? " rank" : " ranks") << " (the launcher sets the world size)\n";
  for (const KeyValue& kv : config.options) os << kv.key << " = " << kv.value << "\n";
  return os.str();
}

}  // namespace hlp::sweep
