#pragma once
// The hlp-train options an experiment file may set (docs/architecture.md, "The surfaces users
// touch"); the choices of each come from hlp-train's own tables (parallel/registry.h, the
// option enums' EnumName tables).
// hlp-sweep checks names and values against this table before it writes anything, so a typo in
// a job file fails in a second on the login node instead of an hour later in the queue.
// When hlp-train gains an option, add it here (or list it in a job file's `train-options`).
#include <set>
#include <string>
#include <vector>

namespace hlp::sweep {

enum class ValueKind { text, integer, number, flag, choice };

struct TrainOption {
  std::string name;                  // as on the command line without "--": "seq-len"
  ValueKind kind;
  std::vector<std::string> choices;  // ValueKind::choice: the accepted values
  std::string short_name;            // used in configuration names ("t" for seq-len), "" = value only
};

const std::vector<TrainOption>& train_options();
const TrainOption* find_train_option(const std::string& name);

// Options hlp-sweep sets itself for every task; a job file must not set them.
const std::set<std::string>& per_task_options();

// When hlp-sweep is built with src/cli (hlp-train's option parser), runs that parser over a
// rendered per-task INI file and throws UserError naming the configuration if hlp-train would
// reject it; otherwise does nothing.
void check_with_hlp_train(const std::string& ini_path, const std::string& config_name);

// Throws UserError when `value` does not fit the option's kind (`where` names the place in the file).
void check_option_value(const TrainOption& option, const std::string& value, const std::string& where);

}  // namespace hlp::sweep
