#pragma once
// Checkpoints: each rank saves what only it holds, so any strategy (replicas or shards) saves
// and resumes the same way, with the same strategy and dp x pp x tp mesh:
//   <dir>/step_<k>/rank_<r>.pt   its optimizer slots (trainable values it owns), AdamW state
//   <dir>/step_<k>/rank_<r>.txt  step, strategy, mesh, pipeline split, data cursor (text)
//   <dir>/latest                 "step_<k>", written by rank 0 after every rank finished
// Frozen weights are not saved: they are a function of (seed, name) and never change.
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/adamw.h"

namespace hlp::train {

struct CheckpointMeta {
  int64_t next_step = 0;          // the step a resumed run starts with
  std::string strategy;
  std::string mesh;               // Mesh::shape_string(): a resume needs the same mesh
  std::string pp_split;           // first layer of each stage ("0,5"); "" without pipeline.
                                  // A resume reuses it, so a measured (profiled) split that
                                  // would come out differently cannot reshuffle the slots.
  std::string data_cursor;        // data::Cursor::serialize() of this rank's loader
  // fp16 loss scaling (train/loss_scaler.h): the scale and its clean-step count, and the AdamW
  // step count (less than next_step when overflowing steps were skipped). Older checkpoints
  // lack them: scale 1, 0 clean steps, AdamW steps = next_step.
  double loss_scale = 1.0;
  int64_t loss_scale_clean_steps = 0;
  int64_t adam_steps = -1;        // -1: unknown (= next_step)
};

// Collective over `world`. Writes this rank's files, then `latest` (rank 0).
void save_checkpoint(const std::string& dir, comm::Communicator& world, const AdamW& optimizer,
                     const CheckpointMeta& meta);

// The newest complete checkpoint's meta for this rank, or nullopt if `dir` has none.
// Throws hlp::UserError if it was written by another strategy or on another mesh.
std::optional<CheckpointMeta> find_checkpoint(const std::string& dir, int rank,
                                              const std::string& strategy,
                                              const std::string& mesh);

// Restores the optimizer slots' values, AdamW state and the RNG from the checkpoint that
// find_checkpoint returned.
void load_checkpoint(const std::string& dir, int rank, const CheckpointMeta& meta,
                     AdamW& optimizer);

// SIGTERM / SIGUSR1 (what Slurm sends before a time limit or preemption) set a flag; the
// trainer checks it between steps, checkpoints and exits with kExitCheckpointedOnSignal.
void install_stop_signal_handlers();
bool stop_signal_received();
void clear_stop_signal();
constexpr int kExitCheckpointedOnSignal = 75;  // EX_TEMPFAIL: "requeue me"

}  // namespace hlp::train
