#include "train_options.h"

#include <cstdlib>
#include <sstream>

#include "common/enum_names.h"
#include "common/error.h"
#include "model/config.h"
#include "model/precision.h"
#include "parallel/registry.h"
#include "train/config.h"
#ifdef HLP_SWEEP_WITH_TRAIN_CLI
#include "cli/options.h"
#endif

namespace hlp::sweep {

const std::vector<TrainOption>& train_options() {
  using K = ValueKind;
  static const std::vector<TrainOption> options = {
      // strategy and mesh
      {"strategy", K::choice, parallel::strategy_names(), ""},
      {"tp", K::integer, {}, "tp"},
      {"pp", K::integer, {}, "pp"},
      {"cp", K::integer, {}, "cp"},
      {"cp-layout", K::choice, enum_names(parallel::kCpLayoutNames), ""},
      {"cp-scheme", K::choice, enum_names(parallel::kCpSchemeNames), ""},
      {"cp-attention", K::choice, enum_names(parallel::kCpAttentionNames), ""},
      {"ep", K::integer, {}, "ep"},
      // model
      {"model", K::choice, model::preset_names(), ""},
      {"pattern", K::text, {}, ""},
      {"gdn-mode", K::choice, enum_names(model::kGdnModeNames), ""},
      {"kernels", K::choice, enum_names(model::kKernelsNames), ""},
      {"attn-impl", K::choice, enum_names(model::kAttnImplNames), ""},
      {"activation-checkpointing", K::flag, {}, "ac"},
      // finetuning
      {"lora-rank", K::integer, {}, "r"},
      {"lora-alpha", K::number, {}, "a"},
      {"lora-dropout", K::number, {}, "dropout"},
      {"lora-targets", K::text, {}, "targets"},
      // data
      {"data", K::text, {}, "data"},
      {"tokenizer", K::text, {}, "tok"},
      {"loader-threads", K::integer, {}, "lt"},
      {"seq-len", K::integer, {}, "t"},
      {"micro-batch", K::integer, {}, "b"},
      {"global-batch", K::integer, {}, "g"},
      // run
      {"steps", K::integer, {}, "s"},
      {"warmup-steps", K::integer, {}, "w"},
      {"lr", K::number, {}, "lr"},
      {"seed", K::integer, {}, "seed"},
      {"threads", K::integer, {}, "th"},
      // pipeline
      {"pp-split", K::text, {}, "split-"},
      {"pp-schedule", K::choice, enum_names(parallel::kPipeScheduleNames), ""},
      {"pp-virtual", K::integer, {}, "v"},
      {"micro-batches", K::integer, {}, "m"},
      // communication, run details (src/cli/options.cpp)
      {"bucket-mb", K::number, {}, "bucket"},
      {"comm-timeout-s", K::number, {}, "timeout"},
      {"jsonl-field", K::text, {}, "field"},
      {"queue-depth", K::integer, {}, "q"},
      {"min-lr-ratio", K::number, {}, "minlr"},
      {"weight-decay", K::number, {}, "wd"},
      {"grad-clip", K::number, {}, "clip"},
      {"precision", K::choice, enum_names(model::kPrecisionNames), ""},
      // device and communication backend (GPU runs: device = cuda, comm = nccl)
      {"device", K::choice, enum_names(train::kDeviceKindNames), ""},
      {"comm", K::choice, enum_names(train::kCommBackendNames), "comm-"},
      {"eval-every", K::integer, {}, "eval"},
      {"flush-every", K::integer, {}, "flush"},
      {"trace", K::flag, {}, "trace"},
      {"checkpoint-every", K::integer, {}, "ckpt"},
      // set per task by hlp-sweep (listed so that the error message can say so)
      {"out", K::text, {}, ""},
      {"checkpoint-dir", K::text, {}, ""},
      {"resume", K::flag, {}, ""},
  };
  return options;
}

// Options hlp-train knows that the table above does not (read from hlp-train's own option
// table when hlp-sweep is built together with src/cli), accepted as free text.
static const std::vector<TrainOption>& options_from_hlp_train() {
  static const std::vector<TrainOption> extra = [] {
    std::vector<TrainOption> found;
#ifdef HLP_SWEEP_WITH_TRAIN_CLI
    std::istringstream ini(hlp::cli::to_ini(hlp::train::TrainConfig{}));
    for (std::string line; std::getline(ini, line);) {
      size_t eq = line.find(" = ");
      if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
      std::string name = line.substr(0, eq);
      bool listed = false;
      for (const TrainOption& o : train_options()) listed = listed || o.name == name;
      if (!listed) found.push_back({name, ValueKind::text, {}, name});
    }
#endif
    return found;
  }();
  return extra;
}

const TrainOption* find_train_option(const std::string& name) {
  for (const TrainOption& option : train_options())
    if (option.name == name) return &option;
  for (const TrainOption& option : options_from_hlp_train())
    if (option.name == name) return &option;
  return nullptr;
}

void check_with_hlp_train(const std::string& ini_path, const std::string& config_name) {
#ifdef HLP_SWEEP_WITH_TRAIN_CLI
  const char* argv[] = {"hlp-train", "--config", ini_path.c_str()};
  try {
    hlp::cli::parse_train_args(3, argv);
  } catch (const UserError& e) {
    throw user_error("configuration '", config_name, "' is rejected by hlp-train: ", e.what());
  }
#else
  (void)ini_path;
  (void)config_name;
#endif
}

const std::set<std::string>& per_task_options() {
  static const std::set<std::string> names = {"out", "checkpoint-dir", "resume", "config"};
  return names;
}

void check_option_value(const TrainOption& option, const std::string& value, const std::string& where) {
  if (value.empty()) throw user_error(where, ": '", option.name, "' has an empty value");
  char* end = nullptr;
  switch (option.kind) {
    case ValueKind::integer: {
      long v = std::strtol(value.c_str(), &end, 10);
      if (end != value.c_str() + value.size() || v < 0)
        throw user_error(where, ": '", option.name, " = ", value, "' is not a non-negative integer");
      break;
    }
    case ValueKind::number:
      std::strtod(value.c_str(), &end);
      if (end != value.c_str() + value.size())
        throw user_error(where, ": '", option.name, " = ", value, "' is not a number");
      break;
    case ValueKind::flag:
      if (value != "true" && value != "false" && value != "1" && value != "0" && value != "yes" &&
          value != "no" && value != "on" && value != "off")
        throw user_error(where, ": '", option.name, " = ", value, "' is not true/false");
      break;
    case ValueKind::choice: {
      std::string list;
      for (const std::string& c : option.choices) {
        if (c == value) return;
        list += (list.empty() ? "" : "|") + c;
      }
      throw user_error(where, ": '", option.name, " = ", value, "' is not one of ", list);
    }
    case ValueKind::text:
      break;
  }
}

}  // namespace hlp::sweep
