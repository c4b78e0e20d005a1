#pragma once
// Shared by the trainer/strategy tests: a small, fast configuration on the shipped corpus and
// the world communicator of the test process.
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/mpi_communicator.h"
#include "train/config.h"

#ifndef HLP_TEST_SOURCE_DIR
#define HLP_TEST_SOURCE_DIR "."
#endif

namespace hlp::test {

inline std::string source_dir() {
  const char* src = std::getenv("HLP_SOURCE_DIR");
  return src ? src : HLP_TEST_SOURCE_DIR;  // ctest sets the variable; the build knows the tree
}

inline std::string sample_corpus() { return source_dir() + "/datasets/sample/corpus.txt"; }

// tiny model (GAGS), T = 32, G = 8, B = 2: 5 steps take well under a second a strategy.
inline train::TrainConfig tiny_config(const std::string& strategy, int lora_rank) {
  train::TrainConfig c;
  c.strategy = hlp::parallel::parse_strategy(strategy);
  c.model = "tiny";
  c.data = sample_corpus();
  c.seq_len = 32;
  c.global_batch = 8;
  c.micro_batch = 2;
  c.steps = 5;
  c.warmup_steps = 1;
  c.lr = 5e-3;
  c.lora_rank = lora_rank;
  c.lora_alpha = 16;
  c.loader_threads = 1;
  c.threads = 1;
  c.seed = 7;
  // HLP_TEST_KERNELS / HLP_TEST_LOSS_IMPL: the same tests on other kernels or loss (ctest's
  // *_lean_* entries run them with the lean kernels)
  if (const char* k = std::getenv("HLP_TEST_KERNELS")) c.kernels = model::parse_kernels(k);
  if (const char* l = std::getenv("HLP_TEST_LOSS_IMPL")) c.loss_impl = model::parse_loss_impl(l);
  return c;
}

inline std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w = [] {
    int argc = 0;
    char** argv = nullptr;
    return std::shared_ptr<comm::Communicator>(comm::init_mpi_world(argc, argv));
  }();
  return w;
}

// A communicator of this rank alone (to run the `single` reference inside an MPI test).
inline std::shared_ptr<comm::Communicator> self() {
  static std::shared_ptr<comm::Communicator> s = world()->split(world()->rank(), 0);
  return s;
}

}  // namespace hlp::test
