// hlp-train: one MPI-launched training job (one strategy per job).
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/launch_env.h"
#include "cli/options.h"
#include "common/error.h"

int main(int argc, char** argv) {
  const int rank = hlp::cli::launcher_rank();
  hlp::cli::ParsedArgs args;
  try {
    args = hlp::cli::parse_train_args(argc, argv);
  } catch (const hlp::UserError& e) {
    // Every rank parses the same arguments and fails the same way: print once, exit everywhere.
    if (rank == 0) std::fprintf(stderr, "hlp-train: error: %s\n", e.what());
    return 2;
  }
  if (args.action == hlp::cli::Action::Help) {
    if (rank == 0) std::cout << args.help_text;
    return 0;
  }
  if (args.action == hlp::cli::Action::PrintConfig) {
    if (rank == 0) std::cout << hlp::cli::to_ini(args.config);
    return 0;
  }
  if (rank == 0)
    std::fprintf(stderr, "hlp-train: error: training is not implemented yet in this build\n");
  return 3;
}
