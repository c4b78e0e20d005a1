// hlp-train: one MPI-launched training job (one strategy per job).
#include <hdf5.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <thread>

#include "cli/launch_env.h"
#include "cli/options.h"
#include "cli/train_job.h"
#include "comm/mpi_communicator.h"
#include "common/error.h"
#include "common/printable.h"
#include "data/tokenizer.h"
#include "model/hf/config_json.h"
#include "train/device.h"

namespace {

// The one line a UserError prints: valid UTF-8 without control characters whatever the message
// quotes (a path from an INI file ...); excerpts of files were already cut short where quoted.
std::string error_line(const hlp::UserError& e) {
  return "hlp-train: error: " + hlp::printable(e.what(), std::string::npos);
}

// A rank other than 0 gives rank 0 two seconds to print the one line and end the job
// (MPI_Abort), then ends it itself. The whole two seconds: sleep_for resumes after a signal,
// where sleep() returned early. Open MPI's launcher stops the other ranks of an aborted job with
// SIGTERM before SIGKILL; hlp-train's checkpoint handler catches SIGTERM, so sleep() returned at
// once and every rank printed the line (cli_hostile_inputs, 2 ranks). MPICH's sends SIGKILL.
void wait_for_rank0_to_speak() { std::this_thread::sleep_for(std::chrono::seconds(2)); }

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
  auto world = hlp::comm::init_mpi_world(argc, argv, {args.config.comm_timeout_s});
  // Before anything is written: a launch that split into worlds of the wrong size ends here on
  // every process (each sees the same environment and the same world size, so all agree).
  if (const std::string why = hlp::cli::launch_mismatch(world->size()); !why.empty()) {
    if (world->rank() == 0) std::fprintf(stderr, "hlp-train: error: %s\n", why.c_str());
    hlp::comm::finalize();
    return 2;
  }
  int exit_code = 0;
  try {
    exit_code = hlp::cli::run_train_job(args.config, world);
  } catch (const hlp::IoError& e) {
    // Disk full, quota, I/O error: every rank learnt it together (the result writer agrees on
    // each write), so rank 0 speaks; the result file keeps what was flushed before.
    if (world->rank() != 0) wait_for_rank0_to_speak();
    hlp::comm::abort_all(error_line(e), hlp::kExitIoError);
  } catch (const hlp::UserError& e) {
    // Usually every rank fails alike (config, data); rank 0 speaks and ends the job. A rank
    // failing alone ends it too, after giving rank 0 a moment to speak first.
    if (world->rank() != 0) wait_for_rank0_to_speak();
    hlp::comm::abort_all(error_line(e), 2);
  } catch (const std::exception& e) {
    hlp::comm::abort_all("hlp-train: internal error on rank " + std::to_string(world->rank()) +
                             ": " + e.what(),
                         1);
  }
  hlp::comm::finalize();
  return exit_code;
}
