// A job in which rank 1 fails just before a collective that every other rank has entered.
// Driven by expect_exit.sh, which checks that mpiexec returns (non-zero) within a bound.
//   hlp-test-comm-failure <mode> <comm-timeout-s>
//   mode: ok     every rank joins (control: exits 0)
//         exit   rank 1 calls std::_Exit(3)
//         kill   rank 1 raises SIGKILL
//         throw  rank 1 throws; main catches and calls abort_all (MPI_Abort)
//         hang   rank 1 sleeps far past the timeout; the others' sync all_reduce (run inline,
//                watched by the comm thread) must time out
//         hang_async  the same, but the others use all_reduce_async + Work::wait
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ok|exit|kill|throw|hang|hang_async <comm-timeout-s>\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  hlp::comm::CommOptions options;
  options.timeout_s = std::atof(argv[2]);
  auto world = hlp::comm::init_mpi_world(argc, argv, options);
  try {
    at::Tensor x = at::ones({1 << 16}, at::kFloat);
    world->all_reduce(x);  // everyone is alive here
    if (world->rank() == 1) {
      if (mode == "exit") std::_Exit(3);
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "throw") throw std::runtime_error("simulated fatal error on rank 1");
      if (mode == "hang" || mode == "hang_async")
        std::this_thread::sleep_for(std::chrono::seconds(600));
    }
    if (mode == "hang_async")
      world->all_reduce_async(x, hlp::comm::ReduceOp::Sum)->wait();
    else
      world->all_reduce(x);  // the others wait here for rank 1
    if (x[0].item<float>() != float(world->size() * world->size()))
      throw std::runtime_error("wrong all_reduce result");
  } catch (const std::exception& e) {
    hlp::comm::abort_all("rank " + std::to_string(world->rank()) + ": fatal: " + e.what(), 1);
  }
  world.reset();
  hlp::comm::finalize();
  return 0;
}
