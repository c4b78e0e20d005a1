// One hlp-train job: the run context, the result file and its records, the progress lines and
// the trainer between them.
#include "cli/train_job.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>
#include <utility>

#include "cli/options.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/printable.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/cuda_memory.h"
#include "metrics/device_peak.h"
#include "metrics/memory.h"
#include "metrics/recorder.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"
#include "metrics/step_report.h"
#include "metrics/torch_info.h"
#include "model/accounting.h"
#include "model/context_shard.h"
#include "model/hf/config_json.h"
#include "model/sdpa_attention.h"
#include "train/checkpoint.h"
#include "train/plan.h"
#include "train/run_context.h"
#include "train/trainer.h"

namespace hlp::cli {

namespace {

// MFU's peak: the CPU measured in this run; a GPU from the datasheet table for the run's
// precision, or measured when the GPU is not in the table.
metrics::PeakFlops peak_flops(const train::RunContext& ctx) {
  const bool half = ctx.config.precision != model::Precision::fp32;
  if (!ctx.device.cuda()) return metrics::measure_cpu_peak_flops(0.3);
  const auto kind = half ? metrics::PeakPrecision::half : metrics::PeakPrecision::fp32;
  if (const auto row = metrics::gpu_peak_flops(ctx.device.name, kind))
    return {row->flops_per_s, row->source};
  return metrics::measure_cuda_peak_flops(ctx.device.device.index(), half);
}

// The root attributes of the result file (schema.h): what ran, where, on what.
metrics::RunInfo run_info(const train::RunContext& ctx, const metrics::PeakFlops& peak,
                          const metrics::Recorder& recorder) {
  metrics::RunInfo info;
  info.backend = train::to_string(ctx.backend);
  info.device = ctx.device.label();
  info.device_kind = train::to_string(ctx.device.kind);
  info.device_name = ctx.device.name;
  info.device_count = ctx.device.visible_devices;
  info.devices_per_node = ctx.device.node_devices_used;
  info.device_memory_bytes = ctx.device.memory_bytes;
  info.compute_capability = ctx.device.compute_capability;
  info.cuda_driver_version = ctx.device.driver_version;
  info.cuda_runtime_version = ctx.device.runtime_version;
  info.strategy = ctx.spec.name();  // the registry's composite name, "fsdp2+tp2"
  const parallel::MeshShape& mesh = ctx.mesh->shape();
  info.mesh = {mesh.dp, mesh.pp, mesh.tp};
  for (parallel::MeshAxis axis : parallel::kMeshAxes) {  // every axis, cp included
    info.mesh_axes.push_back(parallel::mesh_axis_name(axis));
    info.mesh_sizes.push_back(mesh.size(axis));
  }
  info.config_ini = to_ini(ctx.config);
  info.config_identity = identity_ini(ctx.config);
  info.libtorch_version = metrics::libtorch_version();
  info.threads_per_rank = ctx.config.threads;
  info.threads_intra_op = ctx.pools.intra_op;
  info.threads_inter_op = ctx.pools.inter_op;
  info.threads_openmp = ctx.pools.openmp;
  info.blas_library = ctx.pools.blas;
  info.blas_threads = ctx.pools.blas_threads;
  info.node_cores = train::node_cores();
  info.node_ranks = ctx.load.node_ranks;
  info.node_threads_requested = ctx.load.node_threads;
  info.oversubscribed = ctx.load.oversubscribed;
  info.peak_flops_per_device = peak.flops_per_s;
  info.peak_flops_source = peak.source;
  info.clock = recorder.clock();
  return info;
}

// hlp-plan's time model for this very run (its device row; the CPU peak measured above): the
// predicted step time and tokens/s, recorded beside the measured ones. NaN without a prediction.
std::pair<double, double> plan_prediction(const train::RunContext& ctx, const std::string& device,
                                          const parallel::StrategyOptions& so,
                                          const metrics::PeakFlops& peak) {
  try {
    train::PlanInputs in;
    in.train = ctx.config;
    in.model = so.model;
    in.lora = so.lora;
    in.device = train::plan_device(device, ctx.config.precision, ctx.world->size(),
                                   ctx.device.cuda() ? 0.0 : peak.flops_per_s, peak.source);
    const train::RunShape shape = train::run_shape(in, ctx.world->size());
    train::PlanRow row;
    row.candidate = shape.candidate;
    train::predict_time(row, in, shape.stage_split(), shape.batch);
    return {row.step_s, row.tokens_per_s};
  } catch (const UserError&) {  // no prediction: the run itself is not affected
    return {std::nan(""), std::nan("")};
  }
}

// Whether the run's model has sparse MoE layers (their step metrics are written); a model that
// cannot be resolved is refused with its own message when the strategy is built.
bool has_moe_layers(const train::TrainConfig& c) {
  try {
    const model::ModelConfig m = c.model_config.empty()
                                     ? model::resolve_model_config(c.model, c.pattern, c.gdn_mode)
                                     : model::hf::read_hf_config(c.model_config).config;
    return m.count_moe_layers() > 0;
  } catch (const UserError&) {
    return false;
  }
}

// Everything the job records around the trainer: the result file, the model's attributes at
// the start, each step's metrics and progress line, and how the run ended.
class JobRecord {
 public:
  JobRecord(const train::RunContext& ctx, std::shared_ptr<metrics::Recorder> recorder,
            MPI_Comm io_comm)
      : ctx_(ctx), recorder_(std::move(recorder)), peak_(peak_flops(ctx)), t_start_(now_s()) {
    const train::TrainConfig& c = ctx.config;
    run_.devices = ctx.world->size();
    run_.peak_flops_per_device = peak_.flops_per_s;
    run_.bf16 = c.precision == model::Precision::bf16;
    run_.cuda = ctx.device.cuda();
    if (c.out.empty()) return;
    metrics::WriterOptions wo;
    wo.flush_every_steps = c.flush_every;
    wo.expected_steps = c.steps;  // sizes the disk-full reserve
    wo.reserve_bytes = c.result_reserve_kib < 0 ? -1 : c.result_reserve_kib * 1024;
    for (const char* m : metrics::step_extra_metrics(run_.cuda, has_moe_layers(c)))
      wo.extra_metrics.push_back(m);
    // --resume (a requeued task): the file of this run keeps its steps before the checkpoint's
    if (c.resume) wo.append_from_step = ctx.resume ? ctx.resume->next_step : 0;
    writer_ = std::make_unique<metrics::ResultWriter>(io_comm, c.out,
                                                      run_info(ctx, peak_, *recorder_), wo);
  }

  void start(const parallel::StrategyOptions& so, parallel::Strategy& strategy,
             const train::ActivationProfile& activation);
  void step(train::StepReport r, parallel::Strategy& strategy);
  int finish(const train::TrainOutcome& outcome);

 private:
  metrics::MemoryStats memory() const {
    return run_.cuda ? metrics::cuda_memory_stats(ctx_.device.device.index())
                     : metrics::CpuAllocatorCounter::stats();
  }
  // Measured memory of this rank's device (the CPU allocator counter, or the CUDA caching
  // allocator): both reset after every step.
  void reset_memory_peak() const {
    if (run_.cuda)
      metrics::cuda_reset_peak(ctx_.device.device.index());
    else
      metrics::CpuAllocatorCounter::reset_peak();
  }
  void progress_line(const train::StepReport& r, const metrics::StepMetrics& m) const;
  void context_parallel_line(const metrics::ContextParallelInfo& cp) const;
  void experts_line(const metrics::ExpertsInfo& e) const;

  const train::RunContext& ctx_;
  std::shared_ptr<metrics::Recorder> recorder_;
  const metrics::PeakFlops peak_;
  const double t_start_;
  metrics::StepRun run_;
  std::unique_ptr<metrics::ResultWriter> writer_;
  bool trace_drop_reported_ = false;
};

void JobRecord::start(const parallel::StrategyOptions& so, parallel::Strategy& strategy,
                      const train::ActivationProfile& activation) {
  const train::TrainConfig& c = ctx_.config;
  const auto flops = model::training_flops_per_token(
      so.model, so.lora, c.seq_len,
      model::seq_piece_count(c.cp, c.cp_layout == parallel::CpLayout::zigzag));
  run_.flops_per_token_model = flops.model_per_token;
  run_.flops_per_token_executed = flops.executed_per_token;
  if (run_.cuda)
    ctx_.log.info("device %s (cc %s, %d GPU(s) used on rank 0's node), comm %s",
                  ctx_.device.label().c_str(), ctx_.device.compute_capability.c_str(),
                  ctx_.device.node_devices_used, train::to_string(ctx_.backend));
  ctx_.log.info("%s on %d rank(s): model %s (%lld params, %lld trainable; frozen matrices in "
                "%s), T=%d, global batch %d",
                strategy.name().c_str(), ctx_.world->size(), so.model.summary().c_str(),
                (long long)strategy.params_total(), (long long)strategy.params_trainable(),
                model::to_string(c.base_dtype), c.seq_len, c.global_batch);
  if (writer_) {
    metrics::ModelInfo mi;
    mi.name = c.model;
    mi.pattern = so.model.pattern;
    mi.attn_impl =
        model::to_string(model::resolve_attn_impl(so.model.attn_impl, ctx_.device.device));
    mi.params_total = strategy.params_total();
    mi.params_trainable = strategy.params_trainable();
    mi.flops_per_token = flops.model_per_token;
    mi.flops_per_token_executed = flops.executed_per_token;
    for (const auto& k : activation.kinds) {
      mi.activation_kinds.push_back(k.kind);
      mi.activation_saved_bytes.push_back(k.saved);
      mi.activation_saved_checkpointed_bytes.push_back(k.saved_checkpointed);
      mi.activation_transient_bytes.push_back(k.transient);
    }
    mi.activation_probe_lengths = activation.probe_lengths;
    mi.plan_device = train::plan_device_of(train::to_string(ctx_.device.kind), ctx_.device.name);
    if (!mi.plan_device.empty())
      std::tie(mi.plan_step_s, mi.plan_tokens_per_s) =
          plan_prediction(ctx_, mi.plan_device, so, peak_);
    writer_->write_model(mi, strategy.held_bytes().param_elements);
  }
  reset_memory_peak();
}

void JobRecord::step(train::StepReport r, parallel::Strategy& strategy) {
  r.comm_bytes = double(recorder_->take_comm_totals().bytes);
  const auto held = strategy.held_bytes();
  r.param_bytes = held.param_bytes;
  r.grad_bytes = held.grad_bytes;
  r.memory = memory();
  const metrics::StepMetrics m =
      metrics::step_metrics(r, run_, run_.cuda ? metrics::host_rss_bytes() : 0);
  recorder_->record_step(r.step, m);
  if (writer_) {
    writer_->append(*recorder_);
    if (!trace_drop_reported_ && !writer_->trace_dropped().empty()) {
      trace_drop_reported_ = true;  // the same on every rank; rank 0 says it
      ctx_.log.warning("result file '%s': %s; the trace stops, the steps go on (disk-full "
                       "reserve used)", ctx_.config.out.c_str(),
                       printable(writer_->trace_dropped(), std::string::npos).c_str());
    }
  } else {  // nothing to write them to: drop them so memory stays flat
    recorder_->take_events();
    recorder_->take_steps();
  }
  reset_memory_peak();
  progress_line(r, m);
}

void JobRecord::progress_line(const train::StepReport& r, const metrics::StepMetrics& m) const {
  if (!ctx_.log.speaks()) return;
  const train::TrainConfig& c = ctx_.config;
  const double elapsed = now_s() - t_start_;
  const double eta = elapsed / double(r.step + 1) * double(c.steps - r.step - 1);
  char eval[32] = "";
  if (!std::isnan(r.eval_loss)) std::snprintf(eval, sizeof(eval), "  eval %.4f", r.eval_loss);
  char wait[40] = "";
  if (r.pipeline_wait_s > 0)
    std::snprintf(wait, sizeof(wait), "  pipeline wait %.0f%%",
                  100.0 * r.pipeline_wait_s / std::max(1e-9, r.step_time_s));
  char scale[80] = "";  // fp16: the loss scale, and a skipped update
  if (c.precision == model::Precision::fp16)
    std::snprintf(scale, sizeof(scale), "  loss scale %g%s", r.loss_scale,
                  r.step_skipped ? " SKIPPED (fp16 gradient overflow, scale halved)" : "");
  ctx_.log.info("step %lld/%d  loss %.4f%s%s  %.0f tok/s  peak %.1f MiB  comm exposed %.0f%%%s  "
                "cpu %.2f cores  ETA %.0f s",
                (long long)r.step + 1, c.steps, r.loss, eval, scale,
                m.at(metrics::schema::kTokensPerS), double(r.memory.peak_bytes) / (1 << 20),
                100.0 * r.comm_exposed_s / std::max(1e-9, r.step_time_s), wait,
                m.at(metrics::schema::kCpuUtil), eta);
}

// What the sequence split cost: bytes per step and rank (mean over ranks), and the balance of
// the ring-attention tiles (most / mean over ranks).
void JobRecord::context_parallel_line(const metrics::ContextParallelInfo& cp) const {
  const size_t kinds = cp.exchange_kinds.size(), n = cp.attention_s.size();
  std::string line;
  for (size_t k = 0; k < kinds; ++k) {
    double bytes = 0;
    for (size_t r = 0; r < n; ++r)
      bytes += double(cp.bytes_sent[r * kinds * 2 + k * 2] +
                      cp.bytes_sent[r * kinds * 2 + k * 2 + 1]);
    char part[96];
    std::snprintf(part, sizeof(part), "%s%s %.1f KiB", line.empty() ? "" : ", ",
                  cp.exchange_kinds[k].c_str(), bytes / double(n * cp.steps) / 1024);
    line += part;
  }
  double most = 0, mean = 0, chain = 0;
  for (size_t r = 0; r < n; ++r) {
    most = std::max(most, double(cp.attention_score_entries[r]));
    mean += double(cp.attention_score_entries[r]) / double(n);
    chain = std::max(chain, cp.state_chain_s[r] / double(cp.steps));
  }
  ctx_.log.info("cp %lld (%s, G %s, attention %s): sent per rank and step (forward + "
                "backward): %s; ring-attention score pairs most / mean over ranks %.3f; G state "
                "exchange %.3f s a step (most over ranks, waits included)",
                (long long)cp.cp, cp.layout.c_str(), cp.scheme.c_str(),
                cp.attention_scheme.c_str(), line.c_str(), mean > 0 ? most / mean : 1.0, chain);
}

// How evenly the router spread the tokens (most / mean slots an expert, per sparse layer over
// the run, then the mean and worst over the layers) and what --ep's all-to-all sent.
void JobRecord::experts_line(const metrics::ExpertsInfo& e) const {
  const int64_t L = int64_t(e.layers.size()), E = e.experts, steps = e.steps();
  double mean_imbalance = 0, worst = 0;
  for (int64_t l = 0; l < L; ++l) {
    double most = 0, sum = 0;
    for (int64_t e_ = 0; e_ < E; ++e_) {
      double n = 0;
      for (int64_t s = 0; s < steps; ++s) n += double(e.tokens[size_t((s * L + l) * E + e_)]);
      most = std::max(most, n);
      sum += n;
    }
    const double imbalance = sum > 0 ? most / (sum / double(E)) : 1.0;
    mean_imbalance += imbalance / double(L);
    worst = std::max(worst, imbalance);
  }
  double bytes = 0;
  for (int64_t b : e.all_to_all_bytes) bytes += double(b);
  const double per = e.all_to_all_bytes.empty() ? 0 : bytes / double(e.all_to_all_bytes.size()) / double(steps);
  ctx_.log.info("experts: %lld sparse layers x %lld experts (top %lld, ep %lld); tokens per "
                "expert most / mean %.2f (mean over layers), %.2f (worst layer); all-to-all "
                "sent %.1f KiB per rank and step",
                (long long)L, (long long)E, (long long)e.top_k, (long long)e.ep, mean_imbalance,
                worst, per / 1024);
}

// The run's end in the result file and on the console; the process exit code.
int JobRecord::finish(const train::TrainOutcome& outcome) {
  const train::TrainConfig& c = ctx_.config;
  if (c.precision == model::Precision::fp16)
    ctx_.log.info("fp16 loss scaling: %lld of %zu steps skipped (gradient overflow)",
                  (long long)outcome.skipped_steps, outcome.losses.size());
  if (writer_ && outcome.pipeline) writer_->write_pipeline(*outcome.pipeline);
  if (writer_ && outcome.context_parallel)
    writer_->write_context_parallel(*outcome.context_parallel);
  if (outcome.context_parallel && outcome.context_parallel->steps > 0)
    context_parallel_line(*outcome.context_parallel);
  if (writer_ && outcome.experts) writer_->write_experts(*outcome.experts);
  if (outcome.experts && outcome.experts->steps() > 0) experts_line(*outcome.experts);
  int exit_code = 0;
  if (!outcome.non_finite.empty()) {
    exit_code = train::kExitNonFinite;
    if (writer_) {  // readable, the steps before this one, complete = 0
      writer_->flush();
      writer_->set_stopped_reason("non-finite: " + outcome.non_finite);
    }
    ctx_.log.error("%s; stopped before the update on every rank (lower --lr or check the "
                   "data); exit %d", outcome.non_finite.c_str(), exit_code);
  } else if (outcome.stopped_by_signal) {
    exit_code = train::kExitCheckpointedOnSignal;
    const bool saved = !c.checkpoint_dir.empty();
    if (writer_) {  // readable, complete = 0
      writer_->flush();
      writer_->set_stopped_reason(
          std::string("signal: SIGTERM/SIGUSR1, ") +
          (saved ? "checkpoint saved" : "no checkpoint (no --checkpoint-dir)"));
    }
    ctx_.log.info("stopped by signal after step %zu%s; exit %d (requeue to resume)",
                  size_t(outcome.first_step + int64_t(outcome.losses.size())),
                  saved ? ", checkpoint saved" : " (no --checkpoint-dir: nothing saved)",
                  exit_code);
  } else if (writer_) {
    writer_->finish();
    ctx_.log.info("wrote %s", c.out.c_str());
  }
  writer_.reset();
  return exit_code;
}

}  // namespace

int run_train_job(const train::TrainConfig& requested, std::shared_ptr<comm::Communicator> world) {
  metrics::CpuAllocatorCounter::install();  // before the model exists, so every tensor counts
  MPI_Comm io_comm;  // parallel HDF5 and clock alignment get their own communicator
  MPI_Comm_dup(MPI_COMM_WORLD, &io_comm);
  auto recorder = std::make_shared<metrics::Recorder>(world->rank());
  recorder->set_tracing(requested.trace);
  recorder->align_clocks(io_comm);
  world->set_observer(recorder);  // before the mesh: its communicators inherit it
  int exit_code = 0;
  {
    // threads (every pool bounded before the first matrix product), device, backend, mesh
    const train::RunContext ctx = train::resolve_run_context(requested, world);
    JobRecord record(ctx, recorder, io_comm);
    train::TrainHooks hooks;
    hooks.recorder = recorder.get();
    hooks.on_start = [&](const parallel::StrategyOptions& so, parallel::Strategy& strategy,
                         const train::ActivationProfile& activation) {
      record.start(so, strategy, activation);
    };
    hooks.on_step = [&](const train::StepReport& r, parallel::Strategy& strategy) {
      record.step(r, strategy);
    };
    exit_code = record.finish(train::train(ctx, hooks));
  }
  world->set_observer(nullptr);
  MPI_Comm_free(&io_comm);
  return exit_code;
}

}  // namespace hlp::cli
