#include "train/trainer.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "common/clock.h"
#include "common/error.h"
#include "data/loader.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/cuda_memory.h"
#include "metrics/recorder.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/sdpa_attention.h"
#include "parallel/context_parallel.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "parallel/strategy_util.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/data_options.h"
#include "train/device.h"
#include "train/memory_limit.h"
#include "comm/mpi_communicator.h"
#if defined(HLP_HAVE_CUDA)
#include "comm/cuda_timing.h"
#include "comm/nccl_communicator.h"
#endif
#include "train/hf_weights.h"
#include "model/hf/config_json.h"
#include "model/hf/peft.h"
#include "train/loss_scaler.h"
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

// [rows, T+1] tokens -> M micro-batches of inputs [B, T] and targets [B, T] (shifted by one),
// on `device`. On a GPU the tokens go through a pinned host buffer with a non-blocking copy:
// the host does not wait for the transfer (the caching host allocator keeps the buffer until
// the copy has run), so the step never waits on the loader's memory.
std::vector<parallel::MicroBatch> to_micro_batches(const data::Batch& batch,
                                                   const BatchSplit& split,
                                                   const torch::Device& device,
                                                   const model::ContextShard* cp = nullptr) {
  auto tokens = torch::from_blob(const_cast<int64_t*>(batch.tokens.data()),
                                 {batch.rows, batch.cols}, torch::kLong);
  torch::Tensor all;
  if (device.is_cpu()) {
    all = tokens.clone();
  } else {
    torch::Tensor pinned = torch::empty({batch.rows, batch.cols},
                                        torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
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

}  // namespace

namespace {

// Every rank's exchange totals, gathered on every rank of `world` (COLLECTIVE over world).
metrics::ContextParallelInfo context_parallel_info(const parallel::ContextParallel& cp,
                                                   comm::Communicator& world, int64_t steps) {
  metrics::ContextParallelInfo info;
  info.cp = cp.layout().ranks;
  info.layout = cp.layout().zigzag ? "zigzag" : "contiguous";
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
    for (size_t i = 0; i < kinds * 2; ++i) info.bytes_sent.push_back(all[r][int64_t(i)].item<int64_t>());
    info.attention_score_entries.push_back(all[r][int64_t(kinds * 2)].item<int64_t>());
    info.attention_s.push_back(seconds[r][0].item<double>());
    info.state_chain_s.push_back(seconds[r][1].item<double>());
  }
  return info;
}

}  // namespace

RunModel resolve_run_model(const TrainConfig& c, int64_t tokenizer_vocab) {
  RunModel r;
  if (c.model_config.empty()) {
    r.model = model::resolve_model_config(c.model, c.pattern, c.gdn_mode).with_vocab(tokenizer_vocab);
  } else {
    // The checkpoint decides the vocabulary; the tokenizer's ids must fit in it.
    const auto hf = model::hf::read_hf_config(c.model_config);
    r.model = hf.config;
    r.model.gdn_mode = model::parse_gdn_mode(c.gdn_mode);
    r.base_model_name = hf.name_or_path;
    if (tokenizer_vocab > r.model.vocab)
      throw user_error("--tokenizer has ", tokenizer_vocab, " ids but --model-config's "
                       "vocab_size is ", r.model.vocab, "; use the model's tokenizer");
  }
  r.model.activation_checkpointing = c.activation_checkpointing;
  r.model.kernels = model::parse_kernels(c.kernels);
  r.model.attn_impl = model::parse_attn_impl(c.attn_impl);
  r.lora = model::make_lora_config(c.lora_rank, c.lora_alpha, c.lora_dropout, c.lora_targets);
  if (!c.load_adapter.empty()) r.lora = model::hf::read_peft_config(c.load_adapter, r.lora);
  return r;
}

TrainConfig with_parallel_defaults(TrainConfig c, int world_size) {
  if (c.strategy == "pp" && c.pp == 1 && world_size / c.tp > 1) c.pp = world_size / c.tp;
  if (c.strategy == "tp" && c.tp == 1 && world_size / c.pp > 1) c.tp = world_size / c.pp;
  if (c.strategy == "cp" && c.cp == 1 && world_size / (c.tp * c.pp) > 1)
    c.cp = world_size / (c.tp * c.pp);
  return c;
}

namespace {

// Before the first step: a rank whose predicted peak (what it holds now, or its parameters,
// gradients and optimizer state if more, plus the predicted activation peak) needs more memory
// than it may still allocate ends the run on every rank with one line and exit 2, before the
// kernel's OOM killer takes the node (--allow-overcommit: run anyway). Where activations are not
// predicted (NaN: no allocator counter to probe with) nothing is refused. COLLECTIVE over `world`.
void refuse_what_cannot_fit(const TrainConfig& c, comm::Communicator& world,
                            const DeviceInfo& device, const parallel::Strategy& strategy,
                            const AdamW& optimizer, double activation_predicted,
                            int micro_batch) {
  const bool cuda = device.device.is_cuda();
  const int local_ranks = cuda ? 1 : node_local_ranks();  // collective on every rank alike
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
  const auto held = strategy.held_bytes();
  const double state = double(held.param_bytes + held.grad_bytes + optimizer.state_bytes());
  const double peak = std::max(current, state) + activation_predicted;
  const double excess = std::isnan(activation_predicted) || limit < 0 ? -1 : peak - current - limit;
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
    numbers[1] = activation_predicted;
    numbers[2] = current + limit;
    numbers[3] = limit;
  }
  world.all_reduce(numbers, comm::ReduceOp::Sum);
  std::string source = speaker ? limit_source : std::string();
  const auto mib = [&](int i) { return std::to_string(int64_t(numbers[i].item<double>()) >> 20); };
  throw user_error(
      "predicted peak ", mib(0), " MiB on rank ", worst_rank, " (activations ",
      mib(1), " MiB at --seq-len ", c.seq_len, ", --micro-batch ", micro_batch,
      ") exceeds the ", mib(2), " MiB it may use (", speaker ? source : "its memory limit",
      "); lower --seq-len or --micro-batch, add --activation-checkpointing, use more ranks, or "
      "pass --allow-overcommit to run anyway");
}

}  // namespace

TrainOutcome train(const TrainConfig& config, std::shared_ptr<comm::Communicator> world,
                   const TrainHooks& hooks) {
  const TrainConfig c = with_parallel_defaults(config, world->size());
  TrainOutcome outcome;
  outcome.threads = bound_thread_pools(
      c.threads > 0 ? c.threads : default_threads(launcher_local_ranks()));
  // Device and communication backend. `world` stays the MPI communicator for control (stop
  // flag, checkpoints, adapter gathers); the mesh, and with it every strategy collective, runs
  // on NCCL when that is the backend.
  auto* mpi_world = dynamic_cast<comm::MpiCommunicator*>(world.get());
  std::optional<DeviceInfo> selected;
  if (!hooks.device) {
    MPI_Comm dup;
    MPI_Comm_dup(mpi_world ? mpi_world->mpi_comm() : MPI_COMM_WORLD, &dup);
    selected = select_device(c.device, dup);
    MPI_Comm_free(&dup);
  }
  const DeviceInfo& device = hooks.device ? *hooks.device : *selected;
  outcome.comm_backend = resolve_comm(c.comm, device);
  if (c.cp > 1 && outcome.comm_backend == "nccl")
    throw user_error("--cp runs on the MPI backend only (its exchanges are tagged point-to-point "
                     "messages that NCCL does not order alike; not tried on a GPU yet); use "
                     "--comm mpi, or run without --cp");
  std::shared_ptr<comm::Communicator> compute_world = world;
#if defined(HLP_HAVE_CUDA)
  if (outcome.comm_backend == "nccl") {
    if (!mpi_world) throw std::logic_error("train: the NCCL backend bootstraps over MPI");
    compute_world = comm::NcclCommunicator::create(*mpi_world, device.device.index(),
                                                   world->options());
    compute_world->set_observer(world->observer());
  }
  // Phase timers synchronise this GPU at their ends (comm/cuda_timing.h); -1 on CPU runs.
  comm::set_timed_cuda_device(device.device.is_cuda() ? device.device.index() : -1);
#endif
  // The dp x pp x cp x tp mesh (collective). Data parallelism runs over its dp axis; the pp, cp
  // and tp partners of one dp rank read the same rows (the loader is indexed by the dp
  // coordinate); a cp rank then keeps its pieces of every row's tokens (model/context_shard.h).
  auto mesh = std::make_shared<parallel::Mesh>(compute_world, c.tp, c.pp, c.cp);
  std::shared_ptr<parallel::ContextParallel> cp_shard;
  if (mesh->shape().cp > 1)
    cp_shard = std::make_shared<parallel::ContextParallel>(mesh->cp_comm(), c.seq_len,
                                                           c.cp_layout == "zigzag");
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
  const RunModel run_model = resolve_run_model(c, loader->vocab_size());
  so.model = run_model.model;
  model::resolve_attn_impl(so.model.attn_impl, device.device);  // an impossible sdpa fails here, on every rank
  so.lora = run_model.lora;
  const std::string& base_model_name = run_model.base_model_name;  // for adapter_config.json
  so.seed = c.seed;
  so.device = device.device;
  so.precision = model::parse_precision(c.precision);
  so.bucket_mb = c.bucket_mb;
  // gradients are averaged over every rank holding a share of the global batch's tokens
  so.dp_comm = mesh->dp_cp_comm();
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
  so.pp_virtual = c.pp_virtual;
  so.seq_len = c.seq_len;
  so.recorder = hooks.recorder;
  auto strategy = parallel::make_strategy(so);
  if (!c.init_from.empty()) {
    const auto r = init_from_checkpoint(c.init_from, so.model, *strategy);
    // One line per rank: what it read and its allocator peak while reading.
    std::printf("[hlp-train] rank %d: --init-from %s: %lld tensors, %.1f MiB read into %.1f MiB "
                "held in %.3f s; allocator %.1f MiB before, peak %.1f MiB while loading "
                "(peak before loading %.1f MiB: start-up and building the strategy)\n",
                world->rank(), c.init_from.c_str(), (long long)r.tensors,
                double(r.bytes_written) / (1 << 20), double(r.bytes_held) / (1 << 20), r.seconds,
                double(r.allocated_before) / (1 << 20), double(r.peak_during) / (1 << 20),
                double(r.peak_before) / (1 << 20));
    std::fflush(stdout);
  }
  if (!c.load_adapter.empty()) {
    const auto r = load_adapter(c.load_adapter, so.model, so.lora, *strategy);
    if (world->rank() == 0)
      std::printf("[hlp-train] --load-adapter %s: r %lld, alpha %g, %lld adapter regions\n",
                  c.load_adapter.c_str(), (long long)so.lora.rank, so.lora.alpha,
                  (long long)r.tensors);
  }

  // Held-out batch for --eval-every: the same stream laid out with another seed, read once.
  std::vector<parallel::MicroBatch> eval_micro;
  if (c.eval_every > 0) {
    data::DataOptions eval_options = data_options;
    eval_options.seed = c.seed ^ 0x5eedea1ull;
    eval_options.loader_threads = 1;
    data::Loader eval_loader(eval_options, dp_rank, dp);
    eval_micro = to_micro_batches(eval_loader.next(), split, device.device, cp_shard.get());
  }

  AdamWOptions adam;
  adam.weight_decay = c.weight_decay;
  AdamW optimizer(strategy->optim_slots(), adam);
  const LrSchedule schedule{c.lr, c.warmup_steps, c.steps, c.min_lr_ratio};
  LossScalerOptions scaler_options;
  scaler_options.enabled = so.precision == model::Precision::fp16;
  scaler_options.init_scale = c.loss_scale_init;
  scaler_options.growth_interval = c.loss_scale_growth_interval;
  LossScaler scaler(scaler_options);

  std::string pp_split;  // the split actually used, as an explicit list, for the checkpoint
  auto* pipeline = dynamic_cast<parallel::PipelineStrategy*>(strategy.get());
  if (pipeline && mesh->shape().pp > 1) {
    for (int64_t first : pipeline->split().first_block)
      pp_split += (pp_split.empty() ? "" : ",") + std::to_string(first);
  }

  if (resume) {
    load_checkpoint(c.checkpoint_dir, world->rank(), *resume, optimizer);
    scaler.load_state(resume->loss_scale, resume->loss_scale_clean_steps);
    outcome.first_step = resume->next_step;
    if (world->rank() == 0)
      std::printf("[hlp-train] resumed from %s/step_%lld\n", c.checkpoint_dir.c_str(),
                  (long long)resume->next_step);
  }
  // Predicted activation peak of this rank (activation_model.h): probe the layer kinds, then
  // compose for this rank's layers and the micro-batches it holds at once.
  ActivationProfile activation;
  double activation_predicted = std::nan("");
  const bool probe_on_cuda = device.device.is_cuda() && metrics::cuda_memory_available();
  if (probe_on_cuda || (device.device.is_cpu() && metrics::CpuAllocatorCounter::installed())) {
    // the probe runs on the run's device and reads that device's allocator
    const int cuda_index = device.device.is_cuda() ? device.device.index() : -1;
    const MemoryProbe probe =
        probe_on_cuda
            ? MemoryProbe{[=] { return metrics::cuda_memory_stats(cuda_index).current_bytes; },
                          [=] { return metrics::cuda_memory_stats(cuda_index).peak_bytes; },
                          [=] { metrics::cuda_reset_peak(cuda_index); }}
            : MemoryProbe{[] { return metrics::CpuAllocatorCounter::current_bytes(); },
                          [] { return metrics::CpuAllocatorCounter::peak_bytes(); },
                          [] { metrics::CpuAllocatorCounter::reset_peak(); }};
    // flat fsdp: the FlatParameter requires grad as a whole, frozen weights included
    const bool split_backward = pipeline && pipeline->schedule_spec(1).splits_backward();
    // a tp rank's layers: its slice of the heads and the MLP (tp_rank_config)
    // a cp rank's layers see T / cp tokens (the G layers' transition pass is added below)
    activation = probe_activations(tp_rank_config(so.model, mesh->shape().tp), so.lora,
                                   split.micro_batch, c.seq_len / mesh->shape().cp, so.precision,
                                   strategy->name() == "fsdp", device.device, probe,
                                   split_backward);
    const int pp = mesh->shape().pp, stage = mesh->coord().pp;
    std::optional<parallel::PipeSpec> spec;
    if (pipeline && pp > 1) spec = pipeline->schedule_spec(int(split.micro_batches));
    int64_t transition_tokens = 0;  // cp: this rank's tokens outside the sequence's first piece
    if (cp_shard)
      for (const auto& piece : cp_shard->layout().local_pieces())
        if (piece.index > 0) transition_tokens += piece.length;
    activation_predicted =
        predict_rank_activation(activation, so.model, mesh->shape().tp, spec ? &*spec : nullptr,
                                spec ? &pipeline->split().first_block : nullptr,
                                spec ? &pipeline->split().end_block : nullptr, stage,
                                split.micro_batch, transition_tokens, strategy->working_set())
            .total();
  }
  if (world->rank() == 0 && !activation.kinds.empty()) {
    std::string kinds;
    for (const auto& k : activation.kinds)
      kinds += (kinds.empty() ? "" : ", ") + k.kind + " " +
               std::to_string(int64_t(std::llround(k.saved / (1 << 20)))) + " MiB";
    std::printf("[hlp-train] activation probe: saved per micro-batch (B %d, T %d%s): %s; predicted "
                "activation peak %.0f MiB on rank 0\n",
                split.micro_batch, c.seq_len / mesh->shape().cp,
                mesh->shape().cp > 1 ? (" of " + std::to_string(c.seq_len) + " under cp").c_str() : "",
                kinds.c_str(), activation_predicted / (1 << 20));
  }
  refuse_what_cannot_fit(c, *world, device, *strategy, optimizer, activation_predicted,
                         split.micro_batch);
  if (hooks.on_start) hooks.on_start(so, *strategy, activation);
  outcome.strategy_name = strategy->name();
  outcome.params_total = strategy->params_total();
  outcome.params_trainable = strategy->params_trainable();
  // From here on the model's forward (and, on the CPU, backward) runs on this rank's pieces.
  model::ContextShardScope cp_scope(cp_shard.get());
  for (int64_t step = outcome.first_step; step < c.steps; ++step) {
    StepReport r;
    r.step = step;
    const double t_step = now_s(), cpu_step = process_cpu_s(), compute_cpu_step = thread_cpu_s();
    const double loader_cpu_step = loader->stats().worker_cpu_s;
    const double comm_cpu_step = comm::comm_threads_cpu_s();
    const comm::BlockedTotals blocked_step = comm::this_thread_blocked();
    if (hooks.recorder) hooks.recorder->begin_step(step);

    data::Batch batch;
    {
      auto span = hooks.recorder
                      ? hooks.recorder->span("next_batch", metrics::Lane::Data, step)
                      : metrics::Recorder::Span();
      batch = loader->next();
    }
    r.data_wait_s = loader->last_wait_s();
    auto micro = to_micro_batches(batch, split, device.device, cp_shard.get());

    strategy->zero_grad();
    r.loss_scale = scaler.scale();
    strategy->set_loss_scale(r.loss_scale);
    r.loss = strategy->forward_backward(micro, step, r.phases);

    {
      parallel::ComputeTimer timer(r.optimizer_s);  // the grad-norm all-reduce is comm
      auto span = hooks.recorder
                      ? hooks.recorder->span("optimizer", metrics::Lane::Compute, step)
                      : metrics::Recorder::Span();
      r.grad_norm = strategy->grad_norm() / r.loss_scale;  // of the unscaled gradients
      // Loss and gradient norm are global (reduced over every rank), so every rank sees the
      // same non-finite value and stops at the same step, before the update spoils the weights.
      // fp16: a non-finite gradient norm is an overflow of the scaled fp16 gradients, which
      // skips the update and lowers the scale; only a non-finite loss, or a scale driven
      // below its floor, stops the run.
      r.step_skipped = scaler.update(std::isfinite(r.grad_norm));
      if (!std::isfinite(r.loss) || (!scaler.enabled() && !std::isfinite(r.grad_norm))) {
        outcome.non_finite = non_finite_message(step, r.loss, r.grad_norm);
        break;
      }
      if (scaler.below_floor()) {
        outcome.non_finite = "step " + std::to_string(step + 1) + ": fp16 gradients overflow " +
                             "even at loss scale " + std::to_string(r.loss_scale) + " (" +
                             std::to_string(scaler.skipped_steps()) + " steps skipped so far); " +
                             "the run diverges in fp16: use --precision bf16 or fp32, or a " +
                             "lower --lr";
        break;
      }
      r.lr = schedule.at(int(step));
      if (!r.step_skipped) {
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1
        double scale = 1.0;
        if (c.grad_clip > 0) scale = std::min(1.0, c.grad_clip / (r.grad_norm + 1e-6));
        if (scaler.enabled()) scale /= r.loss_scale;  // unscale the fp16 gradients (exact: 2^k)
        optimizer.step(r.lr, scale);
      }
    }
    if (c.eval_every > 0 && (step + 1) % c.eval_every == 0) {
      auto span = hooks.recorder ? hooks.recorder->span("eval", metrics::Lane::Compute, step)
                                 : metrics::Recorder::Span();
      r.eval_loss = strategy->eval_loss(eval_micro);
    }
    r.step_time_s = now_s() - t_step;
    const comm::BlockedTotals blocked = comm::this_thread_blocked();
    r.phases.comm_exposed_s = blocked.collective_s - blocked_step.collective_s;
    r.phases.pipeline_wait_s = blocked.p2p_s - blocked_step.p2p_s;
    r.other_s = r.step_time_s - (r.data_wait_s + r.phases.forward_s + r.phases.backward_s +
                                 r.optimizer_s + r.phases.comm_exposed_s +
                                 r.phases.pipeline_wait_s);
    r.cpu_s = process_cpu_s() - cpu_step;
    r.compute_cpu_s = thread_cpu_s() - compute_cpu_step;
    r.loader_cpu_s = loader->stats().worker_cpu_s - loader_cpu_step;
    r.comm_cpu_s = comm::comm_threads_cpu_s() - comm_cpu_step;
    r.tokens_local = int64_t(split.rows_per_rank) * c.seq_len / mesh->shape().cp;
    r.tokens_global = int64_t(c.global_batch) * c.seq_len;
    r.optimizer_bytes = optimizer.state_bytes();
    r.activation_predicted_bytes = activation_predicted;
    outcome.losses.push_back(r.loss);
    if (hooks.on_step) hooks.on_step(r, *strategy);

    // A signal on any rank (also one that arrived while on_step wrote the results) stops every
    // rank at the same step boundary. This 8-byte agreement runs between steps, outside
    // step_time_s and its phases.
    at::Tensor stop = at::full({1}, stop_signal_received() ? 1 : 0, at::kLong);
    world->all_reduce(stop, comm::ReduceOp::Max);
    const bool stopping = stop.item<int64_t>() != 0;

    const bool periodic = c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0;
    if (!c.checkpoint_dir.empty() && (stopping || periodic || step + 1 == c.steps)) {
      auto span = hooks.recorder ? hooks.recorder->span("checkpoint", metrics::Lane::Data, step)
                                 : metrics::Recorder::Span();
      CheckpointMeta meta{step + 1, c.strategy, mesh_name, pp_split,
                          loader->cursor().serialize()};
      meta.loss_scale = scaler.scale();
      meta.loss_scale_clean_steps = scaler.clean_steps();
      save_checkpoint(c.checkpoint_dir, *world, optimizer, meta);
      if (!c.save_adapter.empty())  // the adapter of this checkpoint, beside its rank files
        save_adapter(c.checkpoint_dir + "/step_" + std::to_string(step + 1) + "/adapter", so.model,
                     so.lora, base_model_name, *strategy, *world);
    }
    if (stopping) {
      outcome.stopped_by_signal = true;
      clear_stop_signal();
      break;
    }
  }
  if (!c.save_adapter.empty() && !outcome.stopped_by_signal) {
    save_adapter(c.save_adapter, so.model, so.lora, base_model_name, *strategy, *world);
    if (world->rank() == 0) std::printf("[hlp-train] wrote PEFT adapter %s\n", c.save_adapter.c_str());
  }
  if (!c.save_merged.empty() && !outcome.stopped_by_signal) {
    save_merged(c.save_merged, so.model, so.lora, c.model_config, *strategy, *world);
    if (world->rank() == 0) std::printf("[hlp-train] wrote merged weights %s\n", c.save_merged.c_str());
  }
  if (pipeline) outcome.pipeline = pipeline->pipeline_info();  // collective over the pp group
  if (cp_shard) outcome.context_parallel = context_parallel_info(*cp_shard, *world,
                                                                 int64_t(outcome.losses.size()));
  outcome.held = strategy->held_bytes();
  outcome.optimizer_bytes = optimizer.state_bytes();
  outcome.skipped_steps = scaler.skipped_steps();
  return outcome;
}

}  // namespace hlp::train
