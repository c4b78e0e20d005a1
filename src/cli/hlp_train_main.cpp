// hlp-train: one MPI-launched training job (one strategy per job).
#include <hdf5.h>

#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/launch_env.h"
#include "cli/mpi_main.h"
#include "cli/options.h"
#include "cli/train_job.h"
#include "comm/mpi_communicator.h"
#include "common/error.h"
#include "common/printable.h"
#include "data/tokenizer.h"
#include "model/hf/config_json.h"
#include "train/device.h"

namespace {

std::string error_line(const hlp::UserError& e) { return hlp::cli::error_line("hlp-train", e); }

}  // namespace

int main(int argc, char** argv) {
  // Before HDF5's first call: no flush of open files at exit, so a result file whose write
  // failed stays as its last successful flush left it (metrics/result_writer.cpp).
  H5dont_atexit();
  const int rank = hlp::cli::launcher_rank();
  hlp::cli::ParsedArgs args;
  try {
    args = hlp::cli::parse_train_args(argc, argv);
    // A bad tokenizer file fails here, before MPI starts, like a bad option: one line, exit 2
    // on every rank (after MPI_Init a UserError ends the job through MPI_Abort).
    if (args.action == hlp::cli::Action::Train) {
      hlp::data::make_tokenizer(args.config.tokenizer);
      // Likewise a bad --model-config (a zero head count, an absurd layer count ...): it is
      // validated without allocating anything.
      if (!args.config.model_config.empty())
        hlp::model::hf::read_hf_config(args.config.model_config);
      // Likewise --device cuda without a usable GPU or CUDA LibTorch, and --comm nccl where
      // NCCL cannot run: every rank of a machine sees the same, so rank 0 says it once.
      hlp::train::check_device_request(args.config.device, args.config.comm);
    }
  } catch (const hlp::UserError& e) {
    // Every rank parses the same arguments and fails the same way: print once, exit everywhere.
    if (rank == 0) std::fprintf(stderr, "%s\n", error_line(e).c_str());
    return 2;
  }
  if (args.action == hlp::cli::Action::Help) {
    if (rank == 0) std::cout << args.help_text;
    return 0;
  }
  if (args.action == hlp::cli::Action::PrintConfig) {
    if (rank != 0) return 0;
    std::cout << hlp::cli::to_ini(args.config);
    if (!args.config.model_config.empty()) {  // where each model value came from
      try {
        std::cout << hlp::model::hf::provenance_text(
            hlp::model::hf::read_hf_config(args.config.model_config));
      } catch (const hlp::UserError& e) {
        std::fprintf(stderr, "%s\n", error_line(e).c_str());
        return 2;
      }
    }
    return 0;
  }
  return hlp::cli::run_on_mpi_world(
      "hlp-train", argc, argv, args.config.comm_timeout_s,
      [&](const std::shared_ptr<hlp::comm::MpiCommunicator>& world) {
        return hlp::cli::run_train_job(args.config, world);
      });
}
