#pragma once
// What a run resolves once, before the model exists, and every later part reads: the
// configuration with the registry's defaults, the compute threads of each rank, the device,
// the communication backend and the mesh. Collective over the world (MPI); hlp-train's job
// (src/cli/train_job.cpp) and the trainer's callers (tests, benchmarks) build it the same way.
#include <mpi.h>

#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "common/log.h"
#include "parallel/mesh.h"
#include "parallel/registry.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/device.h"
#include "train/thread_pools.h"

namespace hlp::train {

// How this node's ranks share its cores.
struct NodeLoad {
  int threads = 1;              // this rank's compute threads (--threads, or its auto value)
  int local_ranks = 1;          // ranks of this run on this rank's node
  int64_t node_ranks = 1;       // most ranks on one node
  int64_t node_threads = 1;     // most compute threads asked for on one node
  bool oversubscribed = false;  // some node's ranks ask for more threads than it has cores
};

struct RunContext {
  TrainConfig config;          // as given, with --threads resolved and the axis defaults applied
  parallel::StrategySpec spec;  // the registry's view of it: config.strategy_spec()
  NodeLoad load;
  ThreadPools pools;           // as bounded for this run
  DeviceInfo device;
  CommBackend backend = CommBackend::mpi;  // what the strategies' collectives run on
  // `world` is the MPI communicator for control (stop flag, checkpoints, adapter gathers);
  // every strategy collective runs on the mesh, built over NCCL when that is the backend.
  std::shared_ptr<comm::Communicator> world;
  std::shared_ptr<parallel::Mesh> mesh;
  // --resume: the newest checkpoint in --checkpoint-dir (nullopt: none, the run starts at step
  // 0). Found once, before the result file opens: the file keeps the steps before its step.
  std::optional<CheckpointMeta> resume;
  Log log{"hlp-train", 0};
};

// Collective over `world` (an MPI communicator). Applies the registry's defaults and world
// rules (UserError), resolves --threads (0: the cores this rank may use) and bounds every
// compute pool (before the first matrix product), selects the device, resolves --comm, and
// builds the mesh. The world's observer (the recorder) should be set before: the mesh's
// communicators inherit it.
RunContext resolve_run_context(const TrainConfig& requested,
                               std::shared_ptr<comm::Communicator> world);

// The node facts behind NodeLoad (collective over `comm`).
NodeLoad node_load(MPI_Comm comm, int requested_threads);

}  // namespace hlp::train
