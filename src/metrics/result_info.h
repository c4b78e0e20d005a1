#pragma once
// What a result file says about the run, the model and the pipeline, as plain structs.
// The writer takes them in, the reader gives them back (docs/results-schema.md: where each
// field lives in the file).
#include <array>
#include <cstdint>
#include <map>
#include <limits>
#include <string>
#include <vector>

#include "metrics/recorder.h"

namespace hlp::metrics {

// Run description. Every field is taken from rank 0 except `clock`, which is gathered from all.
struct RunInfo {
  std::string strategy = "single";  // canonical composite name, e.g. "fsdp2+tp2"
  std::string backend = "mpi";      // "mpi" | "nccl"
  std::string device = "cpu";       // "cpu" | "cuda:NVIDIA H100 80GB HBM3" ...
  // Rank 0's device in detail (train/device.h): kind, name, GPUs visible and used on its node,
  // compute capability, memory, CUDA driver and runtime versions ("" / 0 on CPU runs).
  std::string device_kind = "cpu", device_name = "cpu";
  int64_t device_count = 0, devices_per_node = 0, device_memory_bytes = 0;
  std::string compute_capability, cuda_driver_version, cuda_runtime_version;
  std::array<int64_t, 3> mesh{1, 1, 1};  // dp, pp, tp
  // Every axis of the mesh, cp included (and any later one): names and sizes, same order.
  // Written as mesh_axes "dp,pp,tp,cp" and mesh_sizes [n] when given (hlp-train gives them).
  std::vector<std::string> mesh_axes;
  std::vector<int64_t> mesh_sizes;
  std::string config_ini;           // the whole resolved configuration
  // What makes two launches the same run (the configuration without what may change between
  // launches of one run: --steps, --resume, output and cadence options). Its FNV-1a hash with
  // the world size is the file's config_fingerprint; "" = config_ini.
  std::string config_identity;
  std::string libtorch_version;     // libtorch_version() (torch_info.h) when linked with torch
  int64_t threads_per_rank = 1;     // --threads as resolved (compute threads per rank)
  // The pools as bounded (train/thread_pools.h) and what the node was asked for.
  int64_t threads_intra_op = 1, threads_inter_op = 1, threads_openmp = -1;
  std::string blas_library = "unknown";
  int64_t blas_threads = -1;
  int64_t node_cores = 0, node_ranks = 1, node_threads_requested = 1;
  bool oversubscribed = false;
  double peak_flops_per_device = 0.0;  // FLOP/s the MFU divides by
  std::string peak_flops_source;       // how that peak was obtained (measured sgemm / table)
  ClockAlignment clock;             // this rank's (Recorder::clock())
};

struct ModelInfo {
  std::string name;                // preset ("tiny") or "custom"
  std::string pattern;             // layer pattern, e.g. "GGGAGGGS"
  std::string attn_impl;           // resolved attention kernel: naive | blocked | sdpa ("" = n/a)
  int64_t params_total = 0;
  int64_t params_trainable = 0;
  double flops_per_token = 0.0;           // model-FLOPs convention (6N + mixing)
  double flops_per_token_executed = 0.0;  // FLOPs actually run (LoRA: 4N frozen + 6 adapters)
  std::string flops_convention = "model: 6N + attention/GDN mixing; executed: 4N frozen + 6N trainable + mixing";
  // Activation probe (train/activation_model.h), one entry per kind; empty = not probed.
  std::vector<std::string> activation_kinds;  // "G", "A", "S", "head"
  std::vector<double> activation_saved_bytes, activation_saved_checkpointed_bytes,
      activation_transient_bytes;
  std::vector<int64_t> activation_probe_lengths;
  // params held by each rank (index = world rank); filled from every rank's `params_local`.
  std::vector<int64_t> params_per_rank;
  // hlp-plan's time model for this run (train/plan.h predict_time), before its first step, on
  // the planner's row for its device ("" / NaN: no row); the planner's peak per rank is the
  // per-step param + grad + optimizer + activation_predicted bytes.
  std::string plan_device;
  double plan_step_s = std::numeric_limits<double>::quiet_NaN();
  double plan_tokens_per_s = std::numeric_limits<double>::quiet_NaN();
};

struct PipelineInfo {
  std::vector<int64_t> stage_first_layer;     // [pp V]: first block of each virtual stage
  std::vector<double> stage_cost;             // [pp]: predicted cost (model units)
  std::vector<double> stage_cost_measured_s;  // [pp]: measured seconds per step (may be empty)
  std::vector<double> stage_cpu_measured_s;   // [pp]: compute-thread CPU seconds per step (may be empty)
  double bubble_fraction = 0.0;               // measured idle fraction of wall time
  double bubble_fraction_theory = 0.0;        // the schedule's theory (bubble_theory)
  std::string schedule;                       // "gpipe" | "1f1b" | "interleaved" | "zb-h1"
  int64_t virtual_chunks = 1;                 // V: model chunks per stage
  // The schedule's table on the ideal clock at the run's measured per-chunk F/B/W (NaN: absent)
  double bubble_fraction_simulated = std::numeric_limits<double>::quiet_NaN();
  std::string split;                          // "uniform" | "params" | "balanced" | "L0,L1,..."
  int64_t micro_batches = 0;
};

// Context parallelism totals over the run, gathered from every rank (world order).
struct ContextParallelInfo {
  int64_t cp = 1;
  std::string layout;                       // "zigzag" | "contiguous"
  std::string scheme = "chain";             // "chain" | "allgather" | "alltoall" (G layers)
  std::string attention_scheme = "ring";    // "ring" | "alltoall" (A and S layers)
  std::vector<std::string> exchange_kinds;  // names of the kinds in bytes_sent
  std::vector<int64_t> bytes_sent;          // [world x kinds x 2] (forward, backward)
  std::vector<int64_t> attention_score_entries;  // [world]
  std::vector<double> attention_s;               // [world]
  std::vector<double> state_chain_s;             // [world]
  int64_t steps = 0;
};

// Mixture-of-experts routing over a launch's steps (models with sparse layers), the same on
// every rank (gathered): schema.h's /experts.
struct ExpertsInfo {
  int64_t experts = 0, top_k = 0, ep = 1;
  std::vector<int64_t> layers;            // the sparse layers, in model order
  int64_t first_step = 0;                 // the step of tokens' first row
  std::vector<int64_t> tokens;            // [steps x layers x experts], every rank's tokens
  std::vector<int64_t> rank_tokens;       // [world x layers x experts], summed over the steps
  std::vector<int64_t> all_to_all_bytes;  // [world], summed over the steps
  int64_t steps() const {
    const int64_t row = int64_t(layers.size()) * experts;
    return row > 0 ? int64_t(tokens.size()) / row : 0;
  }
};

struct WriterOptions {
  int flush_every_steps = 10;               // K: append() flushes collectively every K steps
  std::vector<std::string> extra_metrics;   // step metrics beyond schema::kStepMetrics
  // /steps rows are written with collective MPI-IO transfers (H5FD_MPIO_COLLECTIVE). Set false
  // for independent transfers (fewer synchronisations when ranks oversubscribe the cores).
  bool collective_writes = true;
  // /summary medians leave out this many first steps (warm-up: allocation, first-touch, JIT);
  // fewer if the run is shorter (at least one step is always used).
  int summary_skip_steps = 1;
  // Disk-full reserve: rank 0 allocates PATH.reserve beside the file at creation. When a write
  // fails for lack of space (ENOSPC, EDQUOT), the reserve's going-on part is freed, the write
  // retried, the trace dropped, and the steps go on; if space runs out again, its last-resort
  // part lets that flush complete and the run ends with hlp::IoError and a whole file holding
  // every step. The reserve is deleted at the end. reserve_bytes: the going-on part (-1: sized
  // for expected_steps, default 1000, of /steps rows; 0: no reserve at all, so a failed flush
  // may leave the file's last flush half-written).
  int64_t expected_steps = 0;
  int64_t reserve_bytes = -1;
  // Requeue (hlp-train --resume): >= 0 reopens an existing file of the same run (the same
  // config_fingerprint) and appends to it, keeping its steps and trace rows before this step and
  // dropping the rest (a checkpoint at step k resumes with step k); a file of another run is
  // refused (UserError), an absent one is created. A new /segments record names this launch.
  // -1: create the file, truncating any old one.
  int64_t append_from_step = -1;
};

// /summary: per metric, each rank's median over the steps after warm-up, and the max of those.
struct Summary {
  int64_t skip_steps = 0;
  int64_t steps_used = 0;
  std::map<std::string, std::vector<double>> median_per_rank;  // metric -> [world]
  std::map<std::string, double> median_max_over_ranks;         // metric -> scalar
};

}  // namespace hlp::metrics
