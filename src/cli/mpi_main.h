#pragma once
// The MPI part of an MPI-launched front end's main (hlp-train, hlp-eval): the world, the launch
// guard, the body, and how its errors end the job. Rank 0 speaks one line; the exit code is 2 for
// bad input (UserError), kExitIoError for a failed write (IoError), 1 for anything else.
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "cli/launch_env.h"
#include "comm/mpi_communicator.h"
#include "common/error.h"
#include "common/printable.h"

namespace hlp::cli {

// "PROGRAM: error: ...": valid UTF-8 without control characters whatever the message quotes.
inline std::string error_line(const std::string& program, const std::exception& e) {
  return program + ": error: " + printable(e.what(), std::string::npos);
}

// A rank other than 0 gives rank 0 two seconds to print the one line and end the job
// (MPI_Abort), then ends it itself. The whole two seconds: sleep_for resumes after a signal,
// where sleep() returned early. Open MPI's launcher stops the other ranks of an aborted job with
// SIGTERM before SIGKILL; hlp-train's checkpoint handler catches SIGTERM, so sleep() returned at
// once and every rank printed the line (cli_hostile_inputs, 2 ranks). MPICH's sends SIGKILL.
inline void wait_for_rank0_to_speak() { std::this_thread::sleep_for(std::chrono::seconds(2)); }

// Starts MPI, refuses a launch that split into worlds of the wrong size (before anything is
// written: each process sees the same environment and world size, so all agree), runs
// body(world) and returns its exit code; its errors end the job as above. Finalizes MPI.
template <typename Body>
int run_on_mpi_world(const std::string& program, int& argc, char**& argv, double timeout_s,
                     Body&& body) {
  auto world = comm::init_mpi_world(argc, argv, {timeout_s});
  if (const std::string why = launch_mismatch(world->size()); !why.empty()) {
    if (world->rank() == 0) std::fprintf(stderr, "%s: error: %s\n", program.c_str(), why.c_str());
    comm::finalize();
    return 2;
  }
  int exit_code = 0;
  try {
    exit_code = body(world);
  } catch (const IoError& e) {
    // Disk full, quota, I/O error: every rank learnt it together (the result writer agrees on
    // each write), so rank 0 speaks; the result file keeps what was flushed before.
    if (world->rank() != 0) wait_for_rank0_to_speak();
    comm::abort_all(error_line(program, e), kExitIoError);
  } catch (const UserError& e) {
    // Usually every rank fails alike (config, data); rank 0 speaks and ends the job. A rank
    // failing alone ends it too, after giving rank 0 a moment to speak first.
    if (world->rank() != 0) wait_for_rank0_to_speak();
    comm::abort_all(error_line(program, e), 2);
  } catch (const std::exception& e) {
    comm::abort_all(program + ": internal error on rank " + std::to_string(world->rank()) + ": " +
                        e.what(),
                    1);
  }
  comm::finalize();
  return exit_code;
}

}  // namespace hlp::cli
