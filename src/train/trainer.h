#pragma once
// The step loop of hlp-train, readable top to bottom in trainer.cpp (train_step):
//   next global batch (this rank's rows) -> micro-batches -> strategy forward/backward
//   -> global gradient norm, clipping -> AdamW over the strategy's slots -> the step report.
// fp16: the backward runs on the loss times a dynamic scale; an overflow skips the update.
// What the loop runs on is built once before it (session.h); the run's threads, device, backend
// and mesh before that (run_context.h). src/train/README.md has the map.
#include <cmath>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "metrics/result_info.h"
#include "metrics/step_report.h"
#include "parallel/strategy.h"
#include "train/activation_model.h"
#include "train/config.h"
#include "train/thread_pools.h"

namespace hlp::train {

// One finished step as the trainer saw it on this rank (metrics/step_report.h: its fields and
// how they become the result file's step metrics).
using StepReport = metrics::StepReport;

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
  std::string strategy_name;  // the composite name (registry.h)
  CommBackend comm_backend = CommBackend::mpi;  // what the strategy's collectives ran on
  parallel::HeldBytes held;
  int64_t optimizer_bytes = 0;
  int64_t params_total = 0, params_trainable = 0;
  // Pipeline runs (--pp > 1 or --tp > 1): per-stage split, costs, times and bubble, for
  // ResultWriter::write_pipeline (same value on every rank).
  std::optional<metrics::PipelineInfo> pipeline;
  // Context-parallel runs (--cp > 1): every rank's exchanged bytes and attention work, for
  // ResultWriter::write_context_parallel (same value on every rank).
  std::optional<metrics::ContextParallelInfo> context_parallel;
  // Models with sparse MoE layers: the routing of every step and rank, and the all-to-all
  // bytes, for ResultWriter::write_experts (same value on every rank).
  std::optional<metrics::ExpertsInfo> experts;
};

struct RunContext;

struct TrainHooks {
  metrics::Recorder* recorder = nullptr;
  // Called on every rank once the strategy is built (model info for the result file).
  // After the strategy is built, before the first step; `activation` is the probe's profile
  // (activation_model.h; empty kinds when the allocator counter is not installed).
  std::function<void(const parallel::StrategyOptions&, parallel::Strategy&,
                     const ActivationProfile& activation)>
      on_start;
  // Called on every rank after each step (the result writer and progress line hang here).
  std::function<void(const StepReport&, parallel::Strategy&)> on_step;
};

// `--strategy pp` without --pp puts every rank the other axes leave into the pipeline; likewise
// tp and cp (the registry's with_defaults). Other configurations are returned unchanged.
TrainConfig with_parallel_defaults(TrainConfig config, int world_size);

// Runs ctx.config.steps steps (collective over ctx.world). Throws hlp::UserError for
// configurations that cannot run (model, batch arithmetic, data).
TrainOutcome train(const RunContext& ctx, const TrainHooks& hooks = {});
// The same after resolve_run_context(config, world) (run_context.h).
TrainOutcome train(const TrainConfig& config, std::shared_ptr<comm::Communicator> world,
                   const TrainHooks& hooks = {});

// The model and LoRA a configuration runs, as hlp-train resolves them: the preset with the
// vocabulary model::preset_vocabulary gives it under the tokenizer (or --model-config's checkpoint config, whose vocabulary the tokenizer's
// `tokenizer_vocab` ids must fit: UserError), checkpointing, kernels and the requested attention
// kernel (not yet resolved for a device), LoRA (--load-adapter's adapter_config.json wins).
struct RunModel {
  model::ModelConfig model;
  model::LoraConfig lora;
  std::string base_model_name;  // --model-config's name_or_path ("" for a preset)
  // a real model's vocabulary replaced by a smaller tokenizer's (model::preset_vocabulary)
  std::string vocab_warning;
};
RunModel resolve_run_model(const TrainConfig& config, int64_t tokenizer_vocab);

// Micro-batches per step on one data-parallel rank, validated: rows = G / dp must split into
// micro-batches of config.micro_batch rows (or into config.micro_batches pieces).
struct BatchSplit {
  int rows_per_rank = 0;   // G / dp
  int micro_batch = 0;     // B
  int micro_batches = 0;   // M
};
BatchSplit split_batch(const TrainConfig& config, int dp_size);

}  // namespace hlp::train
