#include "train/trainer.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <optional>

#include "common/clock.h"
#include "common/error.h"
#include "data/loader.h"
#include "metrics/recorder.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/sdpa_attention.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/data_options.h"
#include "train/lr_schedule.h"

namespace hlp::train {

BatchSplit split_batch(const TrainConfig& c, int dp_size) {
  if (c.global_batch % dp_size != 0)
    throw user_error("--global-batch ", c.global_batch, " is not divisible by the data-parallel "
                     "size ", dp_size, "; use a multiple of ", dp_size);
  BatchSplit s;
  s.rows_per_rank = c.global_batch / dp_size;
  if (c.micro_batches > 0) {
    if (s.rows_per_rank % c.micro_batches != 0)
      throw user_error("--micro-batches ", c.micro_batches, " does not divide the ",
                       s.rows_per_rank, " sequences per data-parallel rank (global-batch ",
                       c.global_batch, " / dp ", dp_size, ")");
    s.micro_batches = c.micro_batches;
    s.micro_batch = s.rows_per_rank / c.micro_batches;
  } else {
    if (s.rows_per_rank % c.micro_batch != 0)
      throw user_error("--micro-batch ", c.micro_batch, " does not divide the ", s.rows_per_rank,
                       " sequences per data-parallel rank (global-batch ", c.global_batch,
                       " / dp ", dp_size, ")");
    s.micro_batch = c.micro_batch;
    s.micro_batches = s.rows_per_rank / c.micro_batch;
  }
  return s;
}

namespace {

// [rows, T+1] tokens -> M micro-batches of inputs [B, T] and targets [B, T] (shifted by one).
std::vector<parallel::MicroBatch> to_micro_batches(const data::Batch& batch,
                                                   const BatchSplit& split) {
  auto all = torch::from_blob(const_cast<int64_t*>(batch.tokens.data()),
                              {batch.rows, batch.cols}, torch::kLong)
                 .clone();
  const int64_t T = batch.cols - 1;
  std::vector<parallel::MicroBatch> out;
  for (int m = 0; m < split.micro_batches; ++m) {
    auto rows = all.narrow(0, int64_t(m) * split.micro_batch, split.micro_batch);
    out.push_back({rows.narrow(1, 0, T).contiguous(), rows.narrow(1, 1, T).contiguous()});
  }
  return out;
}

}  // namespace

TrainConfig with_parallel_defaults(TrainConfig c, int world_size) {
  if (c.strategy == "pp" && c.pp == 1 && world_size / c.tp > 1) c.pp = world_size / c.tp;
  if (c.strategy == "tp" && c.tp == 1 && world_size / c.pp > 1) c.tp = world_size / c.pp;
  return c;
}

TrainOutcome train(const TrainConfig& config, std::shared_ptr<comm::Communicator> world,
                   const TrainHooks& hooks) {
  const TrainConfig c = with_parallel_defaults(config, world->size());
  at::set_num_threads(c.threads);
  // The dp x pp x tp mesh (collective). Data parallelism runs over its dp axis; the pp and tp
  // partners of one dp rank read the same rows (the loader is indexed by the dp coordinate).
  auto mesh = std::make_shared<parallel::Mesh>(world, c.tp, c.pp);
  const int dp = mesh->shape().dp, dp_rank = mesh->coord().dp;
  const BatchSplit split = split_batch(c, dp);

  const data::DataOptions data_options = data_options_for(c);
  install_stop_signal_handlers();
  std::optional<CheckpointMeta> resume;
  const std::string mesh_name = mesh->shape_string();  // "dp 1 x pp 2 x tp 1"
  if (c.resume) resume = find_checkpoint(c.checkpoint_dir, world->rank(), c.strategy, mesh_name);
  auto loader = resume ? std::make_unique<data::Loader>(data_options, dp_rank, dp,
                                                        data::Cursor::parse(resume->data_cursor))
                       : std::make_unique<data::Loader>(data_options, dp_rank, dp);

  parallel::StrategyOptions so;
  so.name = c.strategy;
  so.model = model::resolve_model_config(c.model, c.pattern, c.gdn_mode)
                 .with_vocab(loader->vocab_size());
  so.model.activation_checkpointing = c.activation_checkpointing;
  so.model.attn_impl = model::parse_attn_impl(c.attn_impl);
  model::resolve_attn_impl(so.model.attn_impl, torch::kCPU);  // an impossible sdpa fails here, on every rank
  so.lora = model::make_lora_config(c.lora_rank, c.lora_alpha, c.lora_dropout, c.lora_targets);
  so.seed = c.seed;
  so.bf16 = c.precision == "bf16";
  so.bucket_mb = c.bucket_mb;
  so.dp_comm = mesh->dp_comm();
  so.mesh = mesh;
  so.pp_split = c.pp_split;
  if (resume && !resume->pp_split.empty() && resume->pp_split != c.pp_split) {
    // The checkpoint's slots belong to its stages: keep its split (a profiled split could
    // come out differently on a new run).
    if (world->rank() == 0)
      std::printf("[hlp-train] resuming with the checkpoint's stage split %s (--pp-split %s)\n",
                  resume->pp_split.c_str(), c.pp_split.c_str());
    so.pp_split = resume->pp_split;
  }
  so.pp_schedule = c.pp_schedule;
  so.seq_len = c.seq_len;
  so.recorder = hooks.recorder;
  auto strategy = parallel::make_strategy(so);

  // Held-out batch for --eval-every: the same stream laid out with another seed, read once.
  std::vector<parallel::MicroBatch> eval_micro;
  if (c.eval_every > 0) {
    data::DataOptions eval_options = data_options;
    eval_options.seed = c.seed ^ 0x5eedea1ull;
    eval_options.loader_threads = 1;
    data::Loader eval_loader(eval_options, dp_rank, dp);
    eval_micro = to_micro_batches(eval_loader.next(), split);
  }

  AdamWOptions adam;
  adam.weight_decay = c.weight_decay;
  AdamW optimizer(strategy->optim_slots(), adam);
  const LrSchedule schedule{c.lr, c.warmup_steps, c.steps, c.min_lr_ratio};

  std::string pp_split;  // the split actually used, as an explicit list, for the checkpoint
  auto* pipeline = dynamic_cast<parallel::PipelineStrategy*>(strategy.get());
  if (pipeline && mesh->shape().pp > 1) {
    for (int64_t first : pipeline->split().first_block)
      pp_split += (pp_split.empty() ? "" : ",") + std::to_string(first);
  }

  TrainOutcome outcome;
  if (resume) {
    load_checkpoint(c.checkpoint_dir, world->rank(), *resume, optimizer);
    outcome.first_step = resume->next_step;
    if (world->rank() == 0)
      std::printf("[hlp-train] resumed from %s/step_%lld\n", c.checkpoint_dir.c_str(),
                  (long long)resume->next_step);
  }
  if (hooks.on_start) hooks.on_start(so, *strategy);
  outcome.strategy_name = strategy->name();
  outcome.params_total = strategy->params_total();
  outcome.params_trainable = strategy->params_trainable();
  for (int64_t step = outcome.first_step; step < c.steps; ++step) {
    StepReport r;
    r.step = step;
    const double t_step = now_s();
    if (hooks.recorder) hooks.recorder->begin_step(step);

    data::Batch batch;
    {
      auto span = hooks.recorder
                      ? hooks.recorder->span("next_batch", metrics::Lane::Data, step)
                      : metrics::Recorder::Span();
      batch = loader->next();
    }
    r.data_wait_s = loader->last_wait_s();
    auto micro = to_micro_batches(batch, split);

    strategy->zero_grad();
    r.loss = strategy->forward_backward(micro, step, r.phases);

    const double t_opt = now_s();
    {
      auto span = hooks.recorder
                      ? hooks.recorder->span("optimizer", metrics::Lane::Compute, step)
                      : metrics::Recorder::Span();
      r.grad_norm = strategy->grad_norm();
      // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1
      double scale = 1.0;
      if (c.grad_clip > 0) scale = std::min(1.0, c.grad_clip / (r.grad_norm + 1e-6));
      r.lr = schedule.at(int(step));
      optimizer.step(r.lr, scale);
    }
    r.optimizer_s = now_s() - t_opt;
    if (c.eval_every > 0 && (step + 1) % c.eval_every == 0) {
      auto span = hooks.recorder ? hooks.recorder->span("eval", metrics::Lane::Compute, step)
                                 : metrics::Recorder::Span();
      r.eval_loss = strategy->eval_loss(eval_micro);
    }
    r.step_time_s = now_s() - t_step;
    r.tokens_local = int64_t(split.rows_per_rank) * c.seq_len;
    r.tokens_global = int64_t(c.global_batch) * c.seq_len;
    r.optimizer_bytes = optimizer.state_bytes();
    outcome.losses.push_back(r.loss);
    if (hooks.on_step) hooks.on_step(r, *strategy);

    // A signal on any rank stops every rank at the same step boundary.
    at::Tensor stop = at::full({1}, stop_signal_received() ? 1 : 0, at::kLong);
    world->all_reduce(stop, comm::ReduceOp::Max);
    const bool stopping = stop.item<int64_t>() != 0;
    const bool periodic = c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0;
    if (!c.checkpoint_dir.empty() && (stopping || periodic || step + 1 == c.steps)) {
      auto span = hooks.recorder ? hooks.recorder->span("checkpoint", metrics::Lane::Data, step)
                                 : metrics::Recorder::Span();
      save_checkpoint(c.checkpoint_dir, *world, optimizer,
                      {step + 1, c.strategy, mesh_name, pp_split, loader->cursor().serialize()});
    }
    if (stopping) {
      outcome.stopped_by_signal = true;
      clear_stop_signal();
      break;
    }
  }
  if (pipeline) outcome.pipeline = pipeline->pipeline_info();  // collective over the pp group
  outcome.held = strategy->held_bytes();
  outcome.optimizer_bytes = optimizer.state_bytes();
  return outcome;
}

}  // namespace hlp::train
