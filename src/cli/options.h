#pragma once
// hlp-train's command line and INI files (Boost.Program_options): every option can be given on
// the command line or in `--config FILE` (same names without dashes); the command line wins.
#include <string>
#include <vector>

#include "train/config.h"

namespace hlp::cli {

enum class Action { Train, Help, PrintConfig };

struct ParsedArgs {
  Action action = Action::Train;
  train::TrainConfig config;
  std::string help_text;  // filled for Action::Help
};

// Parses argv (and the INI file named by --config). Throws hlp::UserError with a one-line message
// naming the option and the problem for anything wrong: unknown option, bad value, unreadable file.
ParsedArgs parse_train_args(int argc, const char* const* argv);

// The resolved configuration as INI text, readable back by --config (round-trips).
std::string to_ini(const train::TrainConfig& config);
// to_ini() without what may change between the launches of one run (--steps, --resume, the
// output, checkpoint and logging cadence, loader and thread counts): a requeued or extended run
// appends to its result file only when this is the same (metrics::RunInfo::config_identity).
std::string identity_ini(const train::TrainConfig& config);

// Checks the values that do not need the world size (choices, ranges, batch arithmetic that
// is independent of the mesh). Throws hlp::UserError.
void validate(const train::TrainConfig& config);

}  // namespace hlp::cli
