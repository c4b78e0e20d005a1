#include "cli/train_job.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/options.h"
#include "common/clock.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/memory.h"
#include "metrics/recorder.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"
#include "metrics/torch_info.h"
#include "model/accounting.h"
#include "model/sdpa_attention.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hlp::cli {

int run_train_job(const train::TrainConfig& requested, std::shared_ptr<comm::Communicator> world) {
  const train::TrainConfig config = train::with_parallel_defaults(requested, world->size());
  namespace schema = metrics::schema;
  metrics::CpuAllocatorCounter::install();  // before the model exists, so every tensor counts
  const int rank = world->rank(), ranks = world->size();

  MPI_Comm io_comm;  // parallel HDF5 and clock alignment get their own communicator
  MPI_Comm_dup(MPI_COMM_WORLD, &io_comm);
  auto recorder = std::make_shared<metrics::Recorder>(rank);
  recorder->set_tracing(config.trace);
  recorder->align_clocks(io_comm);
  world->set_observer(recorder);

  const auto peak = metrics::measure_cpu_peak_flops(0.3);
  metrics::RunInfo info;
  // canonical composite name: the data-parallel strategy plus the model-parallel axes, "fsdp2+tp2"
  info.strategy = config.strategy;
  if (config.pp > 1 && config.strategy != "pp") info.strategy += "+pp" + std::to_string(config.pp);
  if (config.tp > 1 && config.strategy != "tp") info.strategy += "+tp" + std::to_string(config.tp);
  info.mesh = {ranks / (config.pp * config.tp), config.pp, config.tp};
  info.config_ini = to_ini(config);
  info.libtorch_version = metrics::libtorch_version();
  info.threads_per_rank = config.threads;
  info.peak_flops_per_device = peak.flops_per_s;
  info.peak_flops_source = peak.source;
  info.clock = recorder->clock();
  std::unique_ptr<metrics::ResultWriter> writer;
  if (!config.out.empty()) {
    metrics::WriterOptions wo;
    wo.flush_every_steps = config.flush_every;
    wo.extra_metrics = {"eval_loss", "precision_bf16"};
    writer = std::make_unique<metrics::ResultWriter>(io_comm, config.out, info, wo);
  }

  double flops_model = 0, flops_executed = 0;
  const double t_start = now_s();
  train::TrainHooks hooks;
  hooks.recorder = recorder.get();
  hooks.on_start = [&](const parallel::StrategyOptions& so, parallel::Strategy& strategy) {
    const auto flops = model::training_flops_per_token(so.model, so.lora, config.seq_len);
    flops_model = flops.model_per_token;
    flops_executed = flops.executed_per_token;
    if (rank == 0)
      std::printf("[hlp-train] %s on %d rank(s): model %s (%lld params, %lld trainable), "
                  "T=%d, global batch %d\n",
                  strategy.name().c_str(), ranks, so.model.summary().c_str(),
                  (long long)strategy.params_total(), (long long)strategy.params_trainable(),
                  config.seq_len, config.global_batch);
    if (writer) {
      metrics::ModelInfo mi;
      mi.name = config.model;
      mi.pattern = so.model.pattern;
      mi.attn_impl = model::to_string(model::resolve_attn_impl(so.model.attn_impl, torch::kCPU));
      mi.params_total = strategy.params_total();
      mi.params_trainable = strategy.params_trainable();
      mi.flops_per_token = flops_model;
      mi.flops_per_token_executed = flops_executed;
      writer->write_model(mi, strategy.held_bytes().param_bytes / 4);
    }
    metrics::CpuAllocatorCounter::reset_peak();
  };
  hooks.on_step = [&](const train::StepReport& r, parallel::Strategy& strategy) {
    metrics::StepMetrics m;
    m[schema::kLoss] = r.loss;
    m[schema::kTokens] = double(r.tokens_local);
    m[schema::kDataWait] = r.data_wait_s;
    m[schema::kForward] = r.phases.forward_s;
    m[schema::kBackward] = r.phases.backward_s;
    m[schema::kOptimizer] = r.optimizer_s;
    m[schema::kCommExposed] = r.phases.comm_exposed_s;
    m[schema::kCommBytes] = double(recorder->take_comm_totals().bytes);
    m[schema::kLr] = r.lr;
    m["eval_loss"] = r.eval_loss;
    m["precision_bf16"] = config.precision == "bf16" ? 1.0 : 0.0;
    m[schema::kGradNorm] = r.grad_norm;
    const auto held = strategy.held_bytes();
    metrics::CategoryBytes parts{held.param_bytes, held.grad_bytes, r.optimizer_bytes};
    const auto mem = metrics::CpuAllocatorCounter::stats();
    metrics::fill_memory_metrics(m, mem, parts);
    metrics::fill_throughput_metrics(m, double(r.tokens_global), r.step_time_s, ranks,
                                     flops_model, flops_executed, peak.flops_per_s);
    recorder->record_step(r.step, m);
    if (writer) {
      writer->append(*recorder);
    } else {  // nothing to write them to: drop them so memory stays flat
      recorder->take_events();
      recorder->take_steps();
    }
    metrics::CpuAllocatorCounter::reset_peak();
    if (rank == 0) {
      const double elapsed = now_s() - t_start;
      const double eta = elapsed / double(r.step + 1) * double(config.steps - r.step - 1);
      char eval[32] = "";
      if (!std::isnan(r.eval_loss)) std::snprintf(eval, sizeof(eval), "  eval %.4f", r.eval_loss);
      std::printf("[hlp-train] step %lld/%d  loss %.4f%s  %.0f tok/s  peak %.1f MiB  "
                  "comm exposed %.0f%%  ETA %.0f s\n",
                  (long long)r.step + 1, config.steps, r.loss, eval, m[schema::kTokensPerS],
                  double(mem.peak_bytes) / (1 << 20),
                  100.0 * r.phases.comm_exposed_s / std::max(1e-9, r.step_time_s), eta);
      std::fflush(stdout);
    }
  };

  const auto outcome = train::train(config, world, hooks);
  if (writer && outcome.pipeline) writer->write_pipeline(*outcome.pipeline);  // same on all ranks
  int exit_code = 0;
  if (outcome.stopped_by_signal) {
    exit_code = train::kExitCheckpointedOnSignal;
    if (writer) writer->flush();  // readable, complete = 0
    if (rank == 0)
      std::printf("[hlp-train] stopped by signal after step %zu%s; exit %d (requeue to resume)\n",
                  size_t(outcome.first_step + int64_t(outcome.losses.size())),
                  config.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)"
                                                : ", checkpoint saved",
                  exit_code);
  } else if (writer) {
    writer->finish();
    if (rank == 0) std::printf("[hlp-train] wrote %s\n", config.out.c_str());
  }
  writer.reset();
  world->set_observer(nullptr);
  MPI_Comm_free(&io_comm);
  return exit_code;
}

}  // namespace hlp::cli
