#pragma once
// What the step loop (trainer.cpp) works on, built once before the first step by
// open_session(): the loader (resumed where a checkpoint left it), this rank's strategy with
// its weights, the optimizer, the loss scaler, the held-out batch and the predicted activation
// peak. Internal to src/train.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "metrics/result_info.h"
#include "parallel/context_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/strategy.h"
#include "train/activation_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/run_context.h"
#include "train/trainer.h"

namespace hlp::train {

struct Session {
  const RunContext& ctx;
  const TrainHooks& hooks;
  BatchSplit split;
  // cp > 1: this rank's pieces of every sequence and the exchanges between them.
  std::shared_ptr<parallel::ContextParallel> cp_shard;
  // ep > 1: the all-to-all that takes the routed tokens to their experts' ranks and back.
  std::shared_ptr<parallel::ExpertParallel> ep_shard;
  std::optional<CheckpointMeta> resume;  // the checkpoint a --resume starts from
  std::unique_ptr<data::Loader> loader;
  int64_t tokenizer_vocab = 0;  // ids the tokenizer gives (0: no tokenizer, hlp-eval --tokens)
  parallel::StrategyOptions options;
  std::string base_model_name;  // --model-config's name_or_path, for adapter_config.json
  std::unique_ptr<parallel::Strategy> strategy;
  parallel::PipelineStrategy* pipeline = nullptr;  // the strategy, when it is the stage strategy
  std::string pp_split;  // the stage split used, as a list of first layers ("" without pp)
  std::vector<parallel::MicroBatch> eval_micro;  // --eval-every's held-out batch
  std::unique_ptr<AdamW> optimizer;
  LrSchedule schedule;
  std::unique_ptr<LossScaler> scaler;
  ActivationProfile activation;                 // the probe's per-layer-kind bytes
  double activation_predicted = std::nan("");   // this rank's predicted activation peak
  int64_t first_step = 0;                       // > 0 when resumed
  bool evaluation = false;  // hlp-eval: the cross entropy alone (no load-balancing loss)
  // Models with sparse MoE layers: their indices, this launch's per-step routing over every
  // rank ([steps x layers x experts]), this rank's own summed over the steps, and its
  // all-to-all bytes (trainer.cpp: record_routing).
  std::vector<int64_t> moe_layers;
  std::vector<int64_t> step_expert_tokens, rank_expert_tokens;
  int64_t all_to_all_bytes = 0;

  Session(const RunContext& c, const TrainHooks& h) : ctx(c), hooks(h) {}
  const TrainConfig& config() const { return ctx.config; }
  const torch::Device& device() const { return ctx.device.device; }
};

// Collective over the world: everything above, then the refusal of a run predicted not to fit
// (one line, UserError, before the OOM killer would end it).
std::unique_ptr<Session> open_session(const RunContext& ctx, const TrainHooks& hooks);

// hlp-eval's: this rank's strategy with its weights (--init-from, --load-adapter), for one
// sequence at a time (split 1 x 1); no loader, no optimizer. Collective over the world.
std::unique_ptr<Session> open_eval_session(const RunContext& ctx, const TrainHooks& hooks,
                                           int64_t tokenizer_vocab);

// [rows, T+1] tokens -> M micro-batches of inputs [B, T] and targets [B, T] (shifted by one) on
// `device`; under cp, this rank's pieces of every row.
std::vector<parallel::MicroBatch> to_micro_batches(const data::Batch& batch,
                                                   const BatchSplit& split,
                                                   const torch::Device& device,
                                                   const model::ContextShard* cp = nullptr);

// Every rank's context-parallel exchange totals, on every rank (collective over `world`).
metrics::ContextParallelInfo context_parallel_info(const parallel::ContextParallel& cp,
                                                   comm::Communicator& world, int64_t steps);

}  // namespace hlp::train
