// The step loop (trainer.h). open_session() builds what it runs on (session.cpp); train_step()
// is one optimizer step, top to bottom; train() repeats it, reports, checkpoints and stops.
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "comm/communicator.h"
#include "common/clock.h"
#include "common/error.h"
#include "metrics/recorder.h"
#include "model/moe.h"
#include "parallel/strategy_util.h"
#include "train/checkpoint.h"
#include "train/hf_weights.h"
#include "train/run_context.h"
#include "train/session.h"

namespace hlp::train {

TrainConfig with_parallel_defaults(TrainConfig c, int world_size) {
  const parallel::StrategySpec spec = parallel::with_defaults(c.strategy_spec(), world_size);
  c.pp = spec.pp;
  c.tp = spec.tp;
  c.cp = spec.cp;
  c.ep = spec.ep;
  return c;
}

namespace {

// A span on the recorder's lane when a recorder is attached.
metrics::Recorder::Span span(const Session& s, const char* name, metrics::Lane lane, int64_t step) {
  return s.hooks.recorder ? s.hooks.recorder->span(name, lane, step) : metrics::Recorder::Span();
}

std::string non_finite_message(int64_t step, double loss, double grad_norm) {
  // "nan" / "inf" / "-inf", never printf's "-nan"
  auto text = [](double v) {
    if (std::isnan(v)) return std::string("nan");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  const bool loss_bad = !std::isfinite(loss);
  return "step " + std::to_string(step + 1) + ": " +
         (loss_bad ? "loss is " + text(loss) + " (gradient norm " + text(grad_norm) + ")"
                   : "gradient norm is " + text(grad_norm) + " (loss " + text(loss) + ")");
}

// The clocks and counters a step's report is measured against (read at its start).
struct StepStart {
  double wall_s, cpu_s, compute_cpu_s, loader_cpu_s, comm_cpu_s;
  comm::BlockedTotals blocked;
  static StepStart now(const data::Loader& loader) {
    return {now_s(),           process_cpu_s(),           thread_cpu_s(),
            loader.stats().worker_cpu_s, comm::comm_threads_cpu_s(), comm::this_thread_blocked()};
  }
  // Every second of the step attributed once (metrics/step_report.h), and its CPU seconds.
  void finish(StepReport& r, const data::Loader& loader) const {
    r.step_time_s = now_s() - wall_s;
    const comm::BlockedTotals blocked_now = comm::this_thread_blocked();
    r.comm_exposed_s = blocked_now.collective_s - blocked.collective_s;
    r.all_to_all_exposed_s = blocked_now.all_to_all_s - blocked.all_to_all_s;
    r.pipeline_wait_s = blocked_now.p2p_s - blocked.p2p_s;
    r.other_s = r.step_time_s - (r.data_wait_s + r.forward_s + r.backward_s + r.optimizer_s +
                                 r.comm_exposed_s + r.pipeline_wait_s);
    r.cpu_s = process_cpu_s() - cpu_s;
    r.compute_cpu_s = thread_cpu_s() - compute_cpu_s;
    r.loader_cpu_s = loader.stats().worker_cpu_s - loader_cpu_s;
    r.comm_cpu_s = comm::comm_threads_cpu_s() - comm_cpu_s;
  }
};

// The global gradient norm, the fp16 loss scaler's verdict and the AdamW update. Returns "" or
// why the run stops before the update (a non-finite loss or norm; an fp16 scale below its floor).
std::string optimizer_step(Session& s, StepReport& r) {
  parallel::ComputeTimer timer(r.optimizer_s);  // the grad-norm all-reduce is comm
  auto trace = span(s, "optimizer", metrics::Lane::Compute, r.step);
  LossScaler& scaler = *s.scaler;
  r.grad_norm = s.strategy->grad_norm() / r.loss_scale;  // of the unscaled gradients
  // Loss and gradient norm are global (reduced over every rank), so every rank sees the same
  // non-finite value and stops at the same step, before the update spoils the weights. fp16: a
  // non-finite gradient norm is an overflow of the scaled fp16 gradients, which skips the update
  // and lowers the scale; only a non-finite loss, or a scale driven below its floor, stops.
  r.step_skipped = scaler.update(std::isfinite(r.grad_norm));
  if (!std::isfinite(r.loss) || (!scaler.enabled() && !std::isfinite(r.grad_norm)))
    return non_finite_message(r.step, r.loss, r.grad_norm);
  if (scaler.below_floor())
    return "step " + std::to_string(r.step + 1) + ": fp16 gradients overflow even at loss scale " +
           std::to_string(r.loss_scale) + " (" + std::to_string(scaler.skipped_steps()) +
           " steps skipped so far); the run diverges in fp16: use --precision bf16 or fp32, or "
           "a lower --lr";
  r.lr = s.schedule.at(int(r.step));
  if (r.step_skipped) return "";
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1
  const double clip = s.config().grad_clip;
  double scale = clip > 0 ? std::min(1.0, clip / (r.grad_norm + 1e-6)) : 1.0;
  if (scaler.enabled()) scale /= r.loss_scale;  // unscale the fp16 gradients (exact: 2^k)
  s.optimizer->step(r.lr, scale);
  return "";
}

// The step's routing of every sparse layer over every rank (one all-reduce over the world: a
// layer runs on the ranks of one pipeline stage, each with its own tokens; tp does not run
// MoE layers), the worst layer's imbalance, and this rank's own counts summed over the run.
void record_routing(Session& s, const model::RoutingTally& tally, StepReport& r) {
  if (s.moe_layers.empty()) return;
  const int64_t L = int64_t(s.moe_layers.size()), E = s.options.model.moe_experts;
  at::Tensor local = at::zeros({L, E}, at::kLong);
  for (int64_t l = 0; l < L; ++l) {
    auto it = tally.counts.find(s.moe_layers[size_t(l)]);
    if (it != tally.counts.end()) local[l].copy_(it->second);
  }
  if (s.rank_expert_tokens.empty()) s.rank_expert_tokens.assign(size_t(L * E), 0);
  const auto mine = local.accessor<int64_t, 2>();
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) s.rank_expert_tokens[size_t(l * E + e)] += mine[l][e];
  at::Tensor global = local.to(s.ctx.world->scalar_device());
  s.ctx.world->all_reduce(global, comm::ReduceOp::Sum);
  global = global.cpu();
  r.expert_tokens.assign(global.data_ptr<int64_t>(), global.data_ptr<int64_t>() + L * E);
  s.step_expert_tokens.insert(s.step_expert_tokens.end(), r.expert_tokens.begin(),
                              r.expert_tokens.end());
  double worst = std::nan("");
  const auto g = global.to(at::kDouble);
  for (int64_t l = 0; l < L; ++l) {
    const double mean = g[l].mean().item<double>();
    if (mean > 0) {
      const double imbalance = g[l].max().item<double>() / mean;
      worst = std::isnan(worst) ? imbalance : std::max(worst, imbalance);
    }
  }
  r.expert_imbalance = worst;
  s.all_to_all_bytes += int64_t(r.all_to_all_bytes);
}

// Every rank's routing totals and all-to-all bytes, on every rank (collective over the world).
metrics::ExpertsInfo experts_info(const Session& s, int64_t first_step) {
  comm::Communicator& world = *s.ctx.world;
  const model::ModelConfig& m = s.options.model;
  metrics::ExpertsInfo info;
  info.experts = m.moe_experts;
  info.top_k = m.moe_top_k;
  info.ep = s.ctx.spec.ep;
  info.layers = s.moe_layers;
  info.first_step = first_step;
  info.tokens = s.step_expert_tokens;
  std::vector<int64_t> mine = s.rank_expert_tokens;
  mine.resize(size_t(int64_t(s.moe_layers.size()) * m.moe_experts), 0);
  mine.push_back(s.all_to_all_bytes);
  at::Tensor local = at::tensor(mine, at::kLong).to(world.scalar_device());
  at::Tensor all = world.all_gather(local).cpu().view({world.size(), -1});  // [world, L E + 1]
  for (int r = 0; r < world.size(); ++r) {
    const auto row = all[r];
    const int64_t n = row.size(0) - 1;
    for (int64_t i = 0; i < n; ++i) info.rank_tokens.push_back(row[i].item<int64_t>());
    info.all_to_all_bytes.push_back(row[n].item<int64_t>());
  }
  return info;
}

// One optimizer step: this rank's rows of the next global batch, forward and backward over its
// micro-batches, the update, the held-out loss when due. Returns "" or why the run must stop.
// `micro` receives the step's micro-batches: the caller keeps them until the step is reported
// (the step-end current_bytes of every result file has counted them).
std::string train_step(Session& s, StepReport& r, std::vector<parallel::MicroBatch>& micro) {
  const TrainConfig& c = s.config();
  const StepStart start = StepStart::now(*s.loader);
  if (s.hooks.recorder) s.hooks.recorder->begin_step(r.step);
  data::Batch batch;
  {
    auto trace = span(s, "next_batch", metrics::Lane::Data, r.step);
    batch = s.loader->next();
  }
  r.data_wait_s = s.loader->last_wait_s();
  micro = to_micro_batches(batch, s.split, s.device(), s.cp_shard.get());

  s.strategy->zero_grad();
  r.loss_scale = s.scaler->scale();
  s.strategy->set_loss_scale(r.loss_scale);
  parallel::PhaseTimes phases;
  model::RoutingTally tally;  // the sparse layers' routing of this step's forwards
  const int64_t a2a_before = s.ep_shard ? s.ep_shard->stats().total_bytes() : 0;
  {
    model::RoutingTallyScope tally_scope(&tally);
    r.loss = s.strategy->forward_backward(micro, r.step, phases);
  }
  if (s.ep_shard) r.all_to_all_bytes = double(s.ep_shard->stats().total_bytes() - a2a_before);
  r.forward_s = phases.forward_s;
  r.backward_s = phases.backward_s;
  if (std::string stop = optimizer_step(s, r); !stop.empty()) return stop;

  if (c.eval_every > 0 && (r.step + 1) % c.eval_every == 0) {
    auto trace = span(s, "eval", metrics::Lane::Compute, r.step);
    r.eval_loss = s.strategy->eval_loss(s.eval_micro);
  }
  start.finish(r, *s.loader);
  record_routing(s, tally, r);  // (after the step's clocks: its all-reduce is bookkeeping)
  r.tokens_local = int64_t(s.split.rows_per_rank) * c.seq_len / s.ctx.spec.cp;
  r.tokens_global = int64_t(c.global_batch) * c.seq_len;
  r.optimizer_bytes = s.optimizer->state_bytes();
  r.activation_predicted_bytes = s.activation_predicted;
  return "";
}

// A signal on any rank (also one that arrived while the step hook wrote the results) stops
// every rank at the same step boundary. This 8-byte agreement runs between steps, outside
// step_time_s and its phases.
bool agree_to_stop(comm::Communicator& world) {
  at::Tensor stop = at::full({1}, stop_signal_received() ? 1 : 0, at::kLong);
  world.all_reduce(stop, comm::ReduceOp::Max);
  return stop.item<int64_t>() != 0;
}

void checkpoint_if_due(Session& s, int64_t step, bool stopping) {
  const TrainConfig& c = s.config();
  const bool periodic = c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0;
  if (c.checkpoint_dir.empty() || !(stopping || periodic || step + 1 == c.steps)) return;
  auto trace = span(s, "checkpoint", metrics::Lane::Data, step);
  CheckpointMeta meta{step + 1, to_string(c.strategy), s.ctx.mesh->shape_string(), s.pp_split,
                      s.loader->cursor().serialize()};
  meta.loss_scale = s.scaler->scale();
  meta.loss_scale_clean_steps = s.scaler->clean_steps();
  save_checkpoint(c.checkpoint_dir, *s.ctx.world, *s.optimizer, meta);
  if (!c.save_adapter.empty())  // the adapter of this checkpoint, beside its rank files
    save_adapter(c.checkpoint_dir + "/step_" + std::to_string(step + 1) + "/adapter",
                 s.options.model, s.options.lora, s.base_model_name, *s.strategy, *s.ctx.world);
}

// After the last step: the trained adapter and merged weights, and what the outcome reports.
void finish(Session& s, TrainOutcome& outcome) {
  const TrainConfig& c = s.config();
  comm::Communicator& world = *s.ctx.world;
  if (!c.save_adapter.empty() && !outcome.stopped_by_signal) {
    save_adapter(c.save_adapter, s.options.model, s.options.lora, s.base_model_name,
                 *s.strategy, world);
    s.ctx.log.info("wrote PEFT adapter %s", c.save_adapter.c_str());
  }
  if (!c.save_merged.empty() && !outcome.stopped_by_signal) {
    save_merged(c.save_merged, s.options.model, s.options.lora, c.model_config, *s.strategy,
                world);
    s.ctx.log.info("wrote merged weights %s", c.save_merged.c_str());
  }
  if (s.pipeline) outcome.pipeline = s.pipeline->pipeline_info();  // collective over pp
  if (s.cp_shard)
    outcome.context_parallel =
        context_parallel_info(*s.cp_shard, world, int64_t(outcome.losses.size()));
  if (!s.moe_layers.empty()) outcome.experts = experts_info(s, outcome.first_step);
  outcome.held = s.strategy->held_bytes();
  outcome.optimizer_bytes = s.optimizer->state_bytes();
  outcome.skipped_steps = s.scaler->skipped_steps();
}

}  // namespace

TrainOutcome train(const RunContext& ctx, const TrainHooks& hooks) {
  const std::unique_ptr<Session> session = open_session(ctx, hooks);
  Session& s = *session;
  if (hooks.on_start) hooks.on_start(s.options, *s.strategy, s.activation);
  TrainOutcome outcome;
  outcome.threads = ctx.pools;
  outcome.comm_backend = ctx.backend;
  outcome.first_step = s.first_step;
  outcome.strategy_name = s.strategy->name();
  outcome.params_total = s.strategy->params_total();
  outcome.params_trainable = s.strategy->params_trainable();
  // From here on the model's forward (and, on the CPU, backward) runs on this rank's pieces.
  model::ContextShardScope cp_scope(s.cp_shard.get());
  model::ExpertShardScope ep_scope(s.ep_shard.get());
  for (int64_t step = s.first_step; step < ctx.config.steps; ++step) {
    StepReport r;
    r.step = step;
    std::vector<parallel::MicroBatch> micro;  // alive until the end of the step
    outcome.non_finite = train_step(s, r, micro);
    if (!outcome.non_finite.empty()) break;
    outcome.losses.push_back(r.loss);
    if (hooks.on_step) hooks.on_step(r, *s.strategy);
    const bool stopping = agree_to_stop(*ctx.world);
    checkpoint_if_due(s, step, stopping);
    if (stopping) {
      outcome.stopped_by_signal = true;
      clear_stop_signal();
      break;
    }
  }
  finish(s, outcome);
  return outcome;
}

TrainOutcome train(const TrainConfig& config, std::shared_ptr<comm::Communicator> world,
                   const TrainHooks& hooks) {
  return train(resolve_run_context(config, std::move(world)), hooks);
}

}  // namespace hlp::train
