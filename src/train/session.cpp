// Building what the step loop works on (session.h), in the order every rank does it:
// batch split -> data (and the checkpoint to resume) -> model and strategy (and its weights)
// -> held-out batch -> optimizer and loss scaler -> activation prediction -> does it fit.
#include "train/session.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/cuda_memory.h"
#include "model/hf/config_json.h"
#include "model/hf/peft.h"
#include "model/sdpa_attention.h"
#include "parallel/mesh.h"
#include "parallel/registry.h"
#include "train/data_options.h"
#include "train/hf_weights.h"
#include "train/memory_limit.h"

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

RunModel resolve_run_model(const TrainConfig& c, int64_t tokenizer_vocab) {
  RunModel r;
  if (c.model_config.empty()) {
    const auto vocab = model::preset_vocabulary(c.model, tokenizer_vocab, c.tokenizer, c.vocab);
    r.model = model::resolve_model_config(c.model, c.pattern, c.gdn_mode).with_vocab(vocab.vocab);
    r.vocab_warning = vocab.warning;
  } else {
    // The checkpoint decides the vocabulary; the tokenizer's ids must fit in it.
    const auto hf = model::hf::read_hf_config(c.model_config);
    r.model = hf.config;
    r.model.gdn_mode = c.gdn_mode;
    r.base_model_name = hf.name_or_path;
    if (tokenizer_vocab > r.model.vocab)
      throw user_error("--tokenizer has ", tokenizer_vocab, " ids but --model-config's "
                       "vocab_size is ", r.model.vocab, "; use the model's tokenizer");
  }
  r.model.activation_checkpointing = c.activation_checkpointing;
  r.model.kernels = c.kernels;
  r.model.loss_impl = c.loss_impl;
  r.model.attn_impl = c.attn_impl;
  r.lora = model::make_lora_config(c.lora_rank, c.lora_alpha, c.lora_dropout, c.lora_targets);
  if (!c.load_adapter.empty()) r.lora = model::hf::read_peft_config(c.load_adapter, r.lora);
  return r;
}

std::vector<parallel::MicroBatch> to_micro_batches(const data::Batch& batch,
                                                   const BatchSplit& split,
                                                   const torch::Device& device,
                                                   const model::ContextShard* cp) {
  auto tokens = torch::from_blob(const_cast<int64_t*>(batch.tokens.data()),
                                 {batch.rows, batch.cols}, torch::kLong);
  torch::Tensor all;
  if (device.is_cpu()) {
    all = tokens.clone();
  } else {
    // On a GPU the tokens go through a pinned host buffer with a non-blocking copy: the host
    // does not wait for the transfer (the caching host allocator keeps the buffer until the
    // copy has run), so the step never waits on the loader's memory.
    torch::Tensor pinned = torch::empty(
        {batch.rows, batch.cols}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
    pinned.copy_(tokens);
    all = pinned.to(device, /*non_blocking=*/true);
  }
  const int64_t T = batch.cols - 1;
  std::vector<parallel::MicroBatch> out;
  for (int m = 0; m < split.micro_batches; ++m) {
    auto rows = all.narrow(0, int64_t(m) * split.micro_batch, split.micro_batch);
    auto inputs = rows.narrow(1, 0, T), targets = rows.narrow(1, 1, T);
    if (cp) {  // this cp rank's pieces of every sequence (context_shard.h)
      inputs = cp->layout().slice(inputs);
      targets = cp->layout().slice(targets);
    }
    out.push_back({inputs.contiguous(), targets.contiguous()});
  }
  return out;
}

metrics::ContextParallelInfo context_parallel_info(const parallel::ContextParallel& cp,
                                                   comm::Communicator& world, int64_t steps) {
  metrics::ContextParallelInfo info;
  info.cp = cp.layout().ranks;
  info.layout = to_string(cp.layout().zigzag ? parallel::CpLayout::zigzag
                                             : parallel::CpLayout::contiguous);
  info.scheme = to_string(cp.scheme());
  info.attention_scheme = to_string(cp.attention_scheme());
  info.steps = steps;
  const size_t kinds = size_t(parallel::CpExchange::count);
  for (size_t k = 0; k < kinds; ++k)
    info.exchange_kinds.push_back(parallel::cp_exchange_name(parallel::CpExchange(k)));
  const auto& st = cp.stats();
  auto mine = torch::zeros({int64_t(kinds * 2 + 1)}, torch::kLong);
  for (size_t k = 0; k < kinds; ++k)
    for (size_t d = 0; d < 2; ++d) mine[int64_t(k * 2 + d)] = st.bytes_sent[k][d];
  mine[int64_t(kinds * 2)] = st.attention_score_entries;
  const auto all = world.all_gather(mine).view({world.size(), -1});
  const auto seconds = world.all_gather(torch::tensor({st.attention_s, st.state_chain_s},
                                                      torch::kDouble)).view({world.size(), 2});
  for (int r = 0; r < world.size(); ++r) {
    for (size_t i = 0; i < kinds * 2; ++i)
      info.bytes_sent.push_back(all[r][int64_t(i)].item<int64_t>());
    info.attention_score_entries.push_back(all[r][int64_t(kinds * 2)].item<int64_t>());
    info.attention_s.push_back(seconds[r][0].item<double>());
    info.state_chain_s.push_back(seconds[r][1].item<double>());
  }
  return info;
}

namespace {

// The loader over this rank's rows (the dp coordinate picks them: pp, cp and tp partners read
// the same), resumed from the newest checkpoint's cursor with --resume.
void open_data(Session& s) {
  const TrainConfig& c = s.config();
  const parallel::Mesh& mesh = *s.ctx.mesh;
  install_stop_signal_handlers();
  s.resume = s.ctx.resume;  // found by resolve_run_context
  const data::DataOptions options = data_options_for(c);
  const int dp = mesh.shape().dp, dp_rank = mesh.coord().dp;
  s.loader = s.resume ? std::make_unique<data::Loader>(options, dp_rank, dp,
                                                       data::Cursor::parse(s.resume->data_cursor))
                      : std::make_unique<data::Loader>(options, dp_rank, dp);
  s.tokenizer_vocab = s.loader->vocab_size();
}

// The model the run trains, checked against the registry's rules for its mesh, as this rank's
// strategy holds it, with --init-from's and --load-adapter's weights.
void build_strategy(Session& s) {
  const TrainConfig& c = s.config();
  const RunModel run_model = resolve_run_model(c, s.tokenizer_vocab);
  if (!run_model.vocab_warning.empty()) s.ctx.log.warning("%s", run_model.vocab_warning.c_str());
  parallel::StrategyOptions& so = s.options;
  so.strategy = c.strategy;
  so.model = run_model.model;
  // hlp-eval reports each sequence's cross entropy; transformers would add the load-balancing
  // term to its `loss` too when the config's output_router_logits is true (docs/hf-checkpoints.md)
  if (s.evaluation) so.model.moe_aux_loss = false;
  model::resolve_attn_impl(so.model.attn_impl, s.device());  // an impossible sdpa fails here
  so.lora = run_model.lora;
  s.base_model_name = run_model.base_model_name;
  parallel::RunFacts facts;
  facts.model = &so.model;
  facts.lora_dropout = so.lora.dropout;
  facts.seq_len = c.seq_len;
  facts.cp_layout = c.cp_layout;
  facts.cp_scheme = c.cp_scheme;
  facts.cp_attention = c.cp_attention;
  facts.pp_schedule = c.pp_schedule;
  facts.pp_virtual = c.pp_virtual;
  facts.micro_batches = s.split.micro_batches;
  facts.nccl = s.ctx.backend == CommBackend::nccl;
  if (const std::string why = parallel::check_run(s.ctx.spec, facts); !why.empty())
    throw UserError(why);
  so.seed = c.seed;
  so.device = s.device();
  so.precision = c.precision;
  so.base_dtype = c.base_dtype;  // resolved by the run context
  so.bucket_mb = c.bucket_mb;
  // gradients are averaged over every rank holding a share of the global batch's tokens
  so.dp_comm = s.ctx.mesh->dp_cp_comm();
  so.mesh = s.ctx.mesh;
  so.pp_split = c.pp_split;
  if (s.resume && !s.resume->pp_split.empty() && s.resume->pp_split != c.pp_split) {
    // The checkpoint's slots belong to its stages: keep its split (a profiled split could
    // come out differently on a new run).
    s.ctx.log.info("resuming with the checkpoint's stage split %s (--pp-split %s)",
                   s.resume->pp_split.c_str(), c.pp_split.c_str());
    so.pp_split = s.resume->pp_split;
  }
  so.pp_schedule = c.pp_schedule;
  so.pp_virtual = c.pp_virtual;
  so.seq_len = c.seq_len;
  so.recorder = s.hooks.recorder;
  s.strategy = parallel::make_strategy(so);
  for (int64_t l = 0; l < so.model.num_layers(); ++l)
    if (so.model.is_moe_layer(l)) s.moe_layers.push_back(l);
  s.pipeline = dynamic_cast<parallel::PipelineStrategy*>(s.strategy.get());
  if (s.pipeline && s.ctx.spec.pp > 1)
    for (int64_t first : s.pipeline->split().first_block)
      s.pp_split += (s.pp_split.empty() ? "" : ",") + std::to_string(first);
}

void load_weights(Session& s) {
  const TrainConfig& c = s.config();
  if (!c.init_from.empty()) {
    const auto r = init_from_checkpoint(c.init_from, s.options.model, *s.strategy);
    // One line per rank: what it read and its allocator peak while reading.
    s.ctx.log.each_rank("--init-from %s: %lld tensors, %.1f MiB read into %.1f MiB held in "
                        "%.3f s; allocator %.1f MiB before, peak %.1f MiB while loading (peak "
                        "before loading %.1f MiB: start-up and building the strategy)",
                        c.init_from.c_str(), (long long)r.tensors,
                        double(r.bytes_written) / (1 << 20), double(r.bytes_held) / (1 << 20),
                        r.seconds, double(r.allocated_before) / (1 << 20),
                        double(r.peak_during) / (1 << 20), double(r.peak_before) / (1 << 20));
    if (r.tensors_left_out > 0)
      s.ctx.log.info("--init-from %s: %lld tensors of the checkpoint left out (not part of the "
                     "model HLP trains: a tied model's lm_head.weight, a vision tower)",
                     c.init_from.c_str(), (long long)r.tensors_left_out);
  }
  if (!c.load_adapter.empty()) {
    const auto r = load_adapter(c.load_adapter, s.options.model, s.options.lora, *s.strategy);
    s.ctx.log.info("--load-adapter %s: r %lld, alpha %g, %lld adapter regions",
                   c.load_adapter.c_str(), (long long)s.options.lora.rank, s.options.lora.alpha,
                   (long long)r.tensors);
  }
}

// The held-out batch for --eval-every (the same stream laid out with another seed, read once),
// the optimizer over the strategy's slots, the LR schedule and the loss scaler; a resume
// restores the optimizer and the scaler.
void make_optimizer(Session& s) {
  const TrainConfig& c = s.config();
  if (c.eval_every > 0) {
    data::DataOptions eval_options = data_options_for(c);
    eval_options.seed = c.seed ^ 0x5eedea1ull;
    eval_options.loader_threads = 1;
    data::Loader eval_loader(eval_options, s.ctx.mesh->coord().dp, s.ctx.mesh->shape().dp);
    s.eval_micro = to_micro_batches(eval_loader.next(), s.split, s.device(), s.cp_shard.get());
  }
  AdamWOptions adam;
  adam.weight_decay = c.weight_decay;
  s.optimizer = std::make_unique<AdamW>(s.strategy->optim_slots(), adam);
  s.schedule = LrSchedule{c.lr, c.warmup_steps, c.steps, c.min_lr_ratio};
  LossScalerOptions scaler;
  scaler.enabled = c.precision == model::Precision::fp16;
  scaler.init_scale = c.loss_scale_init;
  scaler.growth_interval = c.loss_scale_growth_interval;
  s.scaler = std::make_unique<LossScaler>(scaler);
  if (!s.resume) return;
  load_checkpoint(c.checkpoint_dir, s.ctx.world->rank(), *s.resume, *s.optimizer);
  s.scaler->load_state(s.resume->loss_scale, s.resume->loss_scale_clean_steps);
  s.first_step = s.resume->next_step;
  s.ctx.log.info("resumed from %s/step_%lld", c.checkpoint_dir.c_str(),
                 (long long)s.resume->next_step);
}

// The predicted activation peak of this rank (activation_model.h): the layer kinds probed on
// the run's device, composed for this rank's layers and the micro-batches it holds at once.
// Not predicted (NaN) where no allocator can be read.
void predict_activations(Session& s) {
  const RunContext& ctx = s.ctx;
  const bool cuda = s.device().is_cuda();
  const bool probe_on_cuda = cuda && metrics::cuda_memory_available();
  if (!probe_on_cuda && !(!cuda && metrics::CpuAllocatorCounter::installed())) return;
  const int cuda_index = cuda ? s.device().index() : -1;
  const MemoryProbe probe =
      probe_on_cuda
          ? MemoryProbe{[=] { return metrics::cuda_memory_stats(cuda_index).current_bytes; },
                        [=] { return metrics::cuda_memory_stats(cuda_index).peak_bytes; },
                        [=] { metrics::cuda_reset_peak(cuda_index); }}
          : MemoryProbe{[] { return metrics::CpuAllocatorCounter::current_bytes(); },
                        [] { return metrics::CpuAllocatorCounter::peak_bytes(); },
                        [] { metrics::CpuAllocatorCounter::reset_peak(); }};
  const parallel::MeshShape& mesh = ctx.mesh->shape();
  const bool split_backward = s.pipeline && s.pipeline->schedule_spec(1).splits_backward();
  // a tp rank's layers: its slice of the heads and the MLP (tp_rank_config); a cp rank's see
  // T / cp tokens (the G layers' transition pass is added below); flat fsdp: the FlatParameter
  // requires grad as a whole, frozen weights included
  const bool flat = ctx.spec.dp_kind() == parallel::DpKind::fsdp;
  s.activation = probe_activations(tp_rank_config(s.options.model, mesh.tp), s.options.lora,
                                   s.split.micro_batch, s.config().seq_len / mesh.cp,
                                   s.options.precision, s.options.base_dtype, flat, s.device(),
                                   probe, split_backward);
  std::optional<parallel::PipeSpec> spec;
  if (s.pipeline && mesh.pp > 1) spec = s.pipeline->schedule_spec(int(s.split.micro_batches));
  const int64_t transition_tokens =
      s.cp_shard && parallel::runs_transition_pass(s.cp_shard->scheme())
          ? s.cp_shard->layout().transition_tokens()
          : 0;
  s.activation_predicted =
      predict_rank_activation(s.activation, s.options.model, mesh.tp, spec ? &*spec : nullptr,
                              spec ? &s.pipeline->split().first_block : nullptr,
                              spec ? &s.pipeline->split().end_block : nullptr,
                              ctx.mesh->coord().pp,
                              s.split.micro_batch, transition_tokens, s.strategy->working_set())
          .total();
  if (s.activation.kinds.empty()) return;
  std::string kinds;
  for (const auto& k : s.activation.kinds)
    kinds += (kinds.empty() ? "" : ", ") + k.kind + " " +
             std::to_string(int64_t(std::llround(k.saved / (1 << 20)))) + " MiB";
  const std::string under_cp =
      mesh.cp > 1 ? " of " + std::to_string(s.config().seq_len) + " under cp" : "";
  ctx.log.info("activation probe: saved per micro-batch (B %d, T %d%s): %s; predicted "
               "activation peak %.0f MiB on rank 0",
               s.split.micro_batch, s.config().seq_len / mesh.cp, under_cp.c_str(), kinds.c_str(),
               s.activation_predicted / (1 << 20));
}

// Before the first step: a rank whose predicted peak (what it holds now, or its parameters,
// gradients and optimizer state if more, plus the predicted activation peak) needs more memory
// than it may still allocate ends the run on every rank with one line and exit 2, before the
// kernel's OOM killer takes the node (--allow-overcommit: run anyway). Where activations are not
// predicted (NaN: no allocator counter to probe with) nothing is refused. COLLECTIVE.
void refuse_what_cannot_fit(const Session& s) {
  const TrainConfig& c = s.config();
  const DeviceInfo& device = s.ctx.device;
  comm::Communicator& world = *s.ctx.world;
  const bool cuda = device.device.is_cuda();
  const int local_ranks = cuda ? 1 : s.ctx.load.local_ranks;  // the run's ranks on this node
  if (c.allow_overcommit) return;
  double current = 0, limit = -1;
  std::string limit_source;
  if (cuda) {
    current = double(metrics::cuda_memory_stats(device.device.index()).current_bytes);
    limit = double(device.memory_bytes) - current;
    limit_source = "the GPU's " + std::to_string(device.memory_bytes >> 20) + " MiB";
  } else if (metrics::CpuAllocatorCounter::installed()) {
    current = double(metrics::CpuAllocatorCounter::current_bytes());
    const HostMemory host = host_memory();
    if (host.usable_bytes() >= 0) {
      limit = double(host.usable_bytes()) / local_ranks;
      limit_source = host.source() + " / " + std::to_string(local_ranks) + " rank(s) on this node";
    }
  }
  const auto held = s.strategy->held_bytes();
  const double state = double(held.param_bytes + held.grad_bytes + s.optimizer->state_bytes());
  const double peak = std::max(current, state) + s.activation_predicted;
  const double excess =
      std::isnan(s.activation_predicted) || limit < 0 ? -1 : peak - current - limit;
  at::Tensor worst = at::full({1}, excess, at::kDouble);
  world.all_reduce(worst, comm::ReduceOp::Max);
  if (!(worst.item<double>() > 0)) return;
  // The worst rank's numbers, to every rank (the others add zeros).
  const bool mine = excess == worst.item<double>();
  at::Tensor who = at::full({1}, mine ? -double(world.rank()) : -1e18, at::kDouble);
  world.all_reduce(who, comm::ReduceOp::Max);  // the lowest such rank
  const int64_t worst_rank = -int64_t(who.item<double>());
  const bool speaker = worst_rank == world.rank();
  at::Tensor numbers = at::zeros({4}, at::kDouble);
  if (speaker) {
    numbers[0] = peak;
    numbers[1] = s.activation_predicted;
    numbers[2] = current + limit;
    numbers[3] = limit;
  }
  world.all_reduce(numbers, comm::ReduceOp::Sum);
  // ... and what its limit is, as text: rank 0 prints the line, and the worst rank may be another
  // (it is under Open MPI; MPICH usually makes rank 0 the worst). Its bytes, the others' zeros.
  constexpr int64_t kSourceBytes = 256;
  at::Tensor source = at::zeros({kSourceBytes}, at::kLong);
  if (speaker)
    for (int64_t i = 0; i < std::min<int64_t>(kSourceBytes - 1, limit_source.size()); ++i)
      source[i] = int64_t(static_cast<unsigned char>(limit_source[i]));
  world.all_reduce(source, comm::ReduceOp::Sum);
  std::string worst_source;
  for (int64_t i = 0; i < kSourceBytes && source[i].item<int64_t>() != 0; ++i)
    worst_source += char(source[i].item<int64_t>());
  const auto mib = [&](int i) { return std::to_string(int64_t(numbers[i].item<double>()) >> 20); };
  throw user_error(
      "predicted peak ", mib(0), " MiB on rank ", worst_rank, " (activations ", mib(1),
      " MiB at --seq-len ", c.seq_len, ", --micro-batch ", s.split.micro_batch, ") exceeds the ",
      mib(2), " MiB it may use (", worst_source,
      "); lower --seq-len or --micro-batch, add --activation-checkpointing, use more ranks, or "
      "pass --allow-overcommit to run anyway");
}

}  // namespace

std::unique_ptr<Session> open_session(const RunContext& ctx, const TrainHooks& hooks) {
  auto s = std::make_unique<Session>(ctx, hooks);
  const TrainConfig& c = ctx.config;
  if (ctx.spec.cp > 1)
    s->cp_shard = std::make_shared<parallel::ContextParallel>(
        ctx.mesh->cp_comm(), c.seq_len, c.cp_layout == parallel::CpLayout::zigzag, c.cp_scheme,
        c.cp_attention);
  if (ctx.spec.ep > 1) s->ep_shard = std::make_shared<parallel::ExpertParallel>(ctx.mesh->ep_comm());
  s->split = split_batch(c, ctx.mesh->shape().dp);
  open_data(*s);
  build_strategy(*s);
  load_weights(*s);
  make_optimizer(*s);
  predict_activations(*s);
  refuse_what_cannot_fit(*s);
  return s;
}

std::unique_ptr<Session> open_eval_session(const RunContext& ctx, const TrainHooks& hooks,
                                           int64_t tokenizer_vocab) {
  auto s = std::make_unique<Session>(ctx, hooks);
  const TrainConfig& c = ctx.config;
  if (ctx.spec.cp > 1)
    s->cp_shard = std::make_shared<parallel::ContextParallel>(
        ctx.mesh->cp_comm(), c.seq_len, c.cp_layout == parallel::CpLayout::zigzag, c.cp_scheme,
        c.cp_attention);
  if (ctx.spec.ep > 1) s->ep_shard = std::make_shared<parallel::ExpertParallel>(ctx.mesh->ep_comm());
  s->split = BatchSplit{1, 1, 1};  // one sequence at a time, the same on every rank
  s->tokenizer_vocab = tokenizer_vocab;
  s->evaluation = true;
  build_strategy(*s);
  load_weights(*s);
  return s;
}

}  // namespace hlp::train
