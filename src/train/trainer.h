#pragma once
// The step loop of hlp-train, readable top to bottom in trainer.cpp:
//   next global batch (this rank's rows) -> micro-batches -> strategy forward/backward
//   -> global gradient norm, clipping -> AdamW over the strategy's slots -> metrics, progress.
// fp16: the backward runs on the loss times a dynamic scale; an overflow skips the update.
#include <cmath>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "metrics/result_info.h"
#include "parallel/strategy.h"
#include "train/activation_model.h"
#include "train/config.h"
#include "train/thread_pools.h"

namespace hlp::train {

// One finished step as the trainer saw it on this rank.
struct StepReport {
  int64_t step = 0;
  double loss = 0.0;  // global mean loss (same on every rank)
  double eval_loss = std::nan("");  // held-out loss, every --eval-every steps (NaN otherwise)
  double lr = 0.0;
  double grad_norm = 0.0;  // of the true (unscaled) gradients; inf / nan on an fp16 overflow
  double loss_scale = 1.0;  // fp16: the scale this step's backward used (1 otherwise)
  bool step_skipped = false;  // fp16: gradients overflowed, no optimizer update this step
  // Every second of the step on the compute thread, attributed once:
  //   step_time_s = data_wait_s + forward_s + backward_s + optimizer_s   (compute, phases)
  //               + comm_exposed_s + pipeline_wait_s                   (blocked, phases)
  //               + other_s   (the rest: batch layout, zero_grad, eval, loss bookkeeping)
  double step_time_s = 0.0;
  double data_wait_s = 0.0;
  double optimizer_s = 0.0;  // optimizer compute; the grad-norm all-reduce counts as comm
  double other_s = 0.0;
  parallel::PhaseTimes phases;
  // CPU seconds over the step: the whole process, the compute thread, the loader threads and
  // the communication threads (BLAS / OpenMP workers are in cpu_s but in none of the others).
  double cpu_s = 0.0, compute_cpu_s = 0.0, loader_cpu_s = 0.0, comm_cpu_s = 0.0;
  int64_t optimizer_bytes = 0;
  int64_t tokens_local = 0;   // tokens this rank processed (B*M*T, / cp under context parallelism)
  int64_t tokens_global = 0;  // G * T
  // Predicted activation peak of this rank (activation_model.h; NaN where it was not probed).
  double activation_predicted_bytes = std::nan("");
};

// Exit code of a run stopped because the loss or the gradient norm was not finite.
constexpr int kExitNonFinite = 3;

struct TrainOutcome {
  std::vector<double> losses;  // one per step run (global mean loss)
  int64_t first_step = 0;      // > 0 when resumed from a checkpoint
  bool stopped_by_signal = false;  // SIGTERM/SIGUSR1: checkpointed (if a dir was given), stopped
  // A non-finite loss or gradient norm at some step: every rank stops before that step's
  // optimizer update (the step is not reported to on_step). Empty when the run was not stopped
  // for that reason; otherwise one line, e.g. "step 3: loss is nan (gradient norm nan)".
  std::string non_finite;
  int64_t skipped_steps = 0;  // fp16: steps whose update was skipped (gradient overflow)
  ThreadPools threads;  // the pools as bounded for this run
  std::string strategy_name;
  std::string comm_backend;  // "mpi" | "nccl": what the strategy's collectives ran on
  parallel::HeldBytes held;
  int64_t optimizer_bytes = 0;
  int64_t params_total = 0, params_trainable = 0;
  // Pipeline runs (--pp > 1 or --tp > 1): per-stage split, costs, times and bubble, for
  // ResultWriter::write_pipeline (same value on every rank).
  std::optional<metrics::PipelineInfo> pipeline;
  // Context-parallel runs (--cp > 1): every rank's exchanged bytes and attention work, for
  // ResultWriter::write_context_parallel (same value on every rank).
  std::optional<metrics::ContextParallelInfo> context_parallel;
};

struct DeviceInfo;

struct TrainHooks {
  metrics::Recorder* recorder = nullptr;
  // The device this rank computes on, already selected (train/device.h); nullptr = train()
  // selects it from config.device itself (collective over world).
  const DeviceInfo* device = nullptr;
  // Called on every rank once the strategy is built (model info for the result file).
  // After the strategy is built, before the first step; `activation` is the probe's profile
  // (activation_model.h; empty kinds when the allocator counter is not installed).
  std::function<void(const parallel::StrategyOptions&, parallel::Strategy&,
                     const ActivationProfile& activation)>
      on_start;
  // Called on every rank after each step (the result writer and progress line hang here).
  std::function<void(const StepReport&, parallel::Strategy&)> on_step;
};

// `--strategy pp` without --pp puts every rank (per tp group) into the pipeline; likewise
// `--strategy tp` without --tp. Other configurations are returned unchanged.
TrainConfig with_parallel_defaults(TrainConfig config, int world_size);

// Runs config.steps steps of config.strategy over `world` (collective). Throws hlp::UserError
// for configurations that cannot run (mesh, batch arithmetic, data).
TrainOutcome train(const TrainConfig& config, std::shared_ptr<comm::Communicator> world,
                   const TrainHooks& hooks = {});

// Micro-batches per step on one data-parallel rank, validated: rows = G / dp must split into
// micro-batches of config.micro_batch rows (or into config.micro_batches pieces).
// The model and LoRA a configuration runs, as hlp-train resolves them: the preset with the
// tokenizer's vocabulary (or --model-config's checkpoint config, whose vocabulary the tokenizer's
// `tokenizer_vocab` ids must fit: UserError), checkpointing, kernels and the requested attention
// kernel (not yet resolved for a device), LoRA (--load-adapter's adapter_config.json wins).
struct RunModel {
  model::ModelConfig model;
  model::LoraConfig lora;
  std::string base_model_name;  // --model-config's name_or_path ("" for a preset)
};
RunModel resolve_run_model(const TrainConfig& config, int64_t tokenizer_vocab);

struct BatchSplit {
  int rows_per_rank = 0;   // G / dp
  int micro_batch = 0;     // B
  int micro_batches = 0;   // M
};
BatchSplit split_batch(const TrainConfig& config, int dp_size);

}  // namespace hlp::train
