#include "cli/train_job.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/options.h"
#include "common/clock.h"
#include "common/printable.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/cuda_memory.h"
#include "metrics/device_peak.h"
#include "metrics/memory.h"
#include "metrics/recorder.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"
#include "metrics/torch_info.h"
#include "model/accounting.h"
#include "model/context_shard.h"
#include "model/sdpa_attention.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/thread_pools.h"
#include "train/plan.h"
#include "train/trainer.h"

namespace hlp::cli {

namespace {

// How this node's ranks share its cores: resolves --threads 0 (auto) and sees whether the
// ranks of some node together ask for more compute threads than it has cores. Collective.
struct NodeLoad {
  int threads = 1;              // this rank's compute threads
  int64_t node_ranks = 1;       // most ranks on one node
  int64_t node_threads = 1;     // most compute threads asked for on one node
  bool oversubscribed = false;  // on some node
};

NodeLoad node_load(MPI_Comm world, int requested_threads) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  NodeLoad load;
  load.threads = requested_threads > 0 ? requested_threads : train::default_threads(local_ranks);
  int64_t local[3] = {local_ranks, load.threads, 0}, node_sum[3] = {0, 0, 0};
  MPI_Allreduce(&local[1], &node_sum[1], 1, MPI_INT64_T, MPI_SUM, node);
  local[1] = node_sum[1];
  local[2] = node_sum[1] > train::node_cores() ? 1 : 0;
  int64_t job_max[3] = {0, 0, 0};
  MPI_Allreduce(local, job_max, 3, MPI_INT64_T, MPI_MAX, world);
  MPI_Comm_free(&node);
  load.node_ranks = job_max[0];
  load.node_threads = job_max[1];
  load.oversubscribed = job_max[2] != 0;
  return load;
}

}  // namespace

int run_train_job(const train::TrainConfig& requested, std::shared_ptr<comm::Communicator> world) {
  train::TrainConfig config = train::with_parallel_defaults(requested, world->size());
  namespace schema = metrics::schema;
  metrics::CpuAllocatorCounter::install();  // before the model exists, so every tensor counts
  const int rank = world->rank(), ranks = world->size();

  MPI_Comm io_comm;  // parallel HDF5 and clock alignment get their own communicator
  MPI_Comm_dup(MPI_COMM_WORLD, &io_comm);
  // Bound every compute pool before the first matrix product (the peak-FLOP/s probe below).
  const NodeLoad load = node_load(io_comm, config.threads);
  config.threads = load.threads;  // the resolved value goes into the file's config
  const train::ThreadPools pools = train::bound_thread_pools(config.threads);
  if (rank == 0 && load.oversubscribed)
    std::printf("[hlp-train] warning: %lld rank(s) on one node ask for %lld compute threads "
                "but the node has %d cores; times will be inflated and noisy (lower --threads; "
                "recorded as oversubscribed = 1)\n",
                (long long)load.node_ranks, (long long)load.node_threads, train::node_cores());
  auto recorder = std::make_shared<metrics::Recorder>(rank);
  recorder->set_tracing(config.trace);
  recorder->align_clocks(io_comm);
  world->set_observer(recorder);

  // --device / --comm (collective): the GPU this rank takes, and what the result file says.
  const train::DeviceInfo device = train::select_device(config.device, io_comm);
  const bool on_cuda = device.kind == "cuda";
  const int cuda_index = on_cuda ? device.device.index() : -1;
  const std::string backend = train::resolve_comm(config.comm, device);
  // MFU's peak: the CPU measured in this run; a GPU from the datasheet table for the run's
  // precision, or measured when the GPU is not in the table.
  metrics::PeakFlops peak;
  if (!on_cuda) {
    peak = metrics::measure_cpu_peak_flops(0.3);
  } else if (const auto row = metrics::gpu_peak_flops(device.name, config.precision)) {
    peak = {row->flops_per_s, row->source};
  } else {
    peak = metrics::measure_cuda_peak_flops(cuda_index, config.precision != "fp32");
  }
  metrics::RunInfo info;
  info.backend = backend;
  info.device = device.label();
  info.device_kind = device.kind;
  info.device_name = device.name;
  info.device_count = device.visible_devices;
  info.devices_per_node = device.node_devices_used;
  info.device_memory_bytes = device.memory_bytes;
  info.compute_capability = device.compute_capability;
  info.cuda_driver_version = device.driver_version;
  info.cuda_runtime_version = device.runtime_version;
  // canonical composite name: the data-parallel strategy plus the model-parallel axes, "fsdp2+tp2"
  info.strategy = config.strategy;
  if (config.pp > 1 && config.strategy != "pp") info.strategy += "+pp" + std::to_string(config.pp);
  if (config.tp > 1 && config.strategy != "tp") info.strategy += "+tp" + std::to_string(config.tp);
  const int cp = config.cp;
  if (cp > 1 && config.strategy != "cp") info.strategy += "+cp" + std::to_string(cp);
  // (dp, pp, tp); the cp size is in the config (`cp = N`), read by hlp-analyze
  info.mesh = {ranks / (config.pp * config.tp * cp), config.pp, config.tp};
  info.config_ini = to_ini(config);
  info.libtorch_version = metrics::libtorch_version();
  info.threads_per_rank = config.threads;
  info.threads_intra_op = pools.intra_op;
  info.threads_inter_op = pools.inter_op;
  info.threads_openmp = pools.openmp;
  info.blas_library = pools.blas;
  info.blas_threads = pools.blas_threads;
  info.node_cores = train::node_cores();
  info.node_ranks = load.node_ranks;
  info.node_threads_requested = load.node_threads;
  info.oversubscribed = load.oversubscribed;
  info.peak_flops_per_device = peak.flops_per_s;
  info.peak_flops_source = peak.source;
  info.clock = recorder->clock();
  std::unique_ptr<metrics::ResultWriter> writer;
  if (!config.out.empty()) {
    metrics::WriterOptions wo;
    wo.flush_every_steps = config.flush_every;
    wo.expected_steps = config.steps;  // sizes the disk-full reserve
    wo.reserve_bytes = config.result_reserve_kib < 0 ? -1 : config.result_reserve_kib * 1024;
    wo.extra_metrics = {schema::kEvalLoss, schema::kPrecisionBf16, schema::kLossScale,
                        schema::kStepSkipped, schema::kActivationPredicted};
    // GPU runs: the caching allocator's reserved bytes beside the allocated ones
    // (current_bytes / peak_bytes), and the host's resident memory.
    if (on_cuda)
      for (const char* m : {"reserved_bytes", "reserved_peak_bytes", "host_rss_bytes"})
        wo.extra_metrics.push_back(m);
    writer = std::make_unique<metrics::ResultWriter>(io_comm, config.out, info, wo);
  }

  double flops_model = 0, flops_executed = 0;
  const double t_start = now_s();
  train::TrainHooks hooks;
  hooks.recorder = recorder.get();
  hooks.device = &device;
  // Measured memory of this rank's device: the CPU allocator counter, or the CUDA caching
  // allocator (peak_bytes = allocated peak); both reset after every step.
  auto memory_stats = [&] {
    return on_cuda ? metrics::cuda_memory_stats(cuda_index) : metrics::CpuAllocatorCounter::stats();
  };
  auto reset_memory_peak = [&] {
    if (on_cuda)
      metrics::cuda_reset_peak(cuda_index);
    else
      metrics::CpuAllocatorCounter::reset_peak();
  };
  hooks.on_start = [&](const parallel::StrategyOptions& so, parallel::Strategy& strategy,
                       const train::ActivationProfile& activation) {
    const auto flops = model::training_flops_per_token(
        so.model, so.lora, config.seq_len,
        model::seq_piece_count(config.cp, config.cp_layout == "zigzag"));
    flops_model = flops.model_per_token;
    flops_executed = flops.executed_per_token;
    if (rank == 0 && on_cuda)
      std::printf("[hlp-train] device %s (cc %s, %d GPU(s) used on rank 0's node), comm %s\n",
                  device.label().c_str(), device.compute_capability.c_str(),
                  device.node_devices_used, backend.c_str());
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
      mi.attn_impl = model::to_string(model::resolve_attn_impl(so.model.attn_impl, device.device));
      mi.params_total = strategy.params_total();
      mi.params_trainable = strategy.params_trainable();
      mi.flops_per_token = flops_model;
      mi.flops_per_token_executed = flops_executed;
      for (const auto& k : activation.kinds) {
        mi.activation_kinds.push_back(k.kind);
        mi.activation_saved_bytes.push_back(k.saved);
        mi.activation_saved_checkpointed_bytes.push_back(k.saved_checkpointed);
        mi.activation_transient_bytes.push_back(k.transient);
      }
      mi.activation_probe_lengths = activation.probe_lengths;
      // hlp-plan's time model for this very run (its device row; the CPU peak measured above)
      mi.plan_device = train::plan_device_of(device.kind, device.name);
      if (!mi.plan_device.empty()) {
        try {
          train::PlanInputs in;
          in.train = config;
          in.model = so.model;
          in.lora = so.lora;
          in.device = train::plan_device(mi.plan_device, config.precision, ranks,
                                         on_cuda ? 0.0 : peak.flops_per_s, peak.source);
          const train::RunShape shape = train::run_shape(in, ranks);
          train::PlanRow row;
          row.candidate = shape.candidate;
          train::predict_time(row, in, shape.stage_split(), shape.batch);
          mi.plan_step_s = row.step_s;
          mi.plan_tokens_per_s = row.tokens_per_s;
        } catch (const UserError&) {  // no prediction: the run itself is not affected
        }
      }
      writer->write_model(mi, strategy.held_bytes().param_bytes / 4);
    }
    reset_memory_peak();
  };
  bool trace_drop_reported = false;
  hooks.on_step = [&](const train::StepReport& r, parallel::Strategy& strategy) {
    metrics::StepMetrics m;
    m[schema::kLoss] = r.loss;
    m[schema::kTokens] = double(r.tokens_local);
    m[schema::kDataWait] = r.data_wait_s;
    m[schema::kForward] = r.phases.forward_s;
    m[schema::kBackward] = r.phases.backward_s;
    m[schema::kOptimizer] = r.optimizer_s;
    m[schema::kCommExposed] = r.phases.comm_exposed_s;
    m[schema::kPipelineWait] = r.phases.pipeline_wait_s;
    m[schema::kOther] = r.other_s;
    m[schema::kCpu] = r.cpu_s;
    m[schema::kCpuUtil] = r.step_time_s > 0 ? r.cpu_s / r.step_time_s : 0.0;
    m[schema::kComputeCpu] = r.compute_cpu_s;
    m[schema::kLoaderCpu] = r.loader_cpu_s;
    m[schema::kCommCpu] = r.comm_cpu_s;
    m[schema::kCommBytes] = double(recorder->take_comm_totals().bytes);
    m[schema::kLr] = r.lr;
    m[schema::kEvalLoss] = r.eval_loss;
    m[schema::kPrecisionBf16] = config.precision == "bf16" ? 1.0 : 0.0;
    m[schema::kLossScale] = r.loss_scale;
    m[schema::kStepSkipped] = r.step_skipped ? 1.0 : 0.0;
    m[schema::kActivationPredicted] = r.activation_predicted_bytes;
    m[schema::kGradNorm] = r.grad_norm;
    const auto held = strategy.held_bytes();
    metrics::CategoryBytes parts{held.param_bytes, held.grad_bytes, r.optimizer_bytes};
    const auto mem = memory_stats();
    metrics::fill_memory_metrics(m, mem, parts);
    if (on_cuda) {
      m["reserved_bytes"] = double(mem.reserved_bytes);
      m["reserved_peak_bytes"] = double(mem.reserved_peak_bytes);
      m["host_rss_bytes"] = double(metrics::host_rss_bytes());
    }
    metrics::fill_throughput_metrics(m, double(r.tokens_global), r.step_time_s, ranks,
                                     flops_model, flops_executed, peak.flops_per_s);
    recorder->record_step(r.step, m);
    if (writer) {
      writer->append(*recorder);
      if (!trace_drop_reported && !writer->trace_dropped().empty()) {
        trace_drop_reported = true;  // the same on every rank; rank 0 says it
        if (rank == 0)
          std::fprintf(stderr, "hlp-train: warning: result file '%s': %s; the trace stops, the "
                       "steps go on (disk-full reserve used)\n", config.out.c_str(),
                       printable(writer->trace_dropped(), std::string::npos).c_str());
      }
    } else {  // nothing to write them to: drop them so memory stays flat
      recorder->take_events();
      recorder->take_steps();
    }
    reset_memory_peak();
    if (rank == 0) {
      const double elapsed = now_s() - t_start;
      const double eta = elapsed / double(r.step + 1) * double(config.steps - r.step - 1);
      char eval[32] = "";
      if (!std::isnan(r.eval_loss)) std::snprintf(eval, sizeof(eval), "  eval %.4f", r.eval_loss);
      char wait[40] = "";
      if (r.phases.pipeline_wait_s > 0)
        std::snprintf(wait, sizeof(wait), "  pipeline wait %.0f%%",
                      100.0 * r.phases.pipeline_wait_s / std::max(1e-9, r.step_time_s));
      char scale[80] = "";  // fp16: the loss scale, and a skipped update
      if (config.precision == "fp16")
        std::snprintf(scale, sizeof(scale), "  loss scale %g%s", r.loss_scale,
                      r.step_skipped ? " SKIPPED (fp16 gradient overflow, scale halved)" : "");
      std::printf("[hlp-train] step %lld/%d  loss %.4f%s%s  %.0f tok/s  peak %.1f MiB  "
                  "comm exposed %.0f%%%s  cpu %.2f cores  ETA %.0f s\n",
                  (long long)r.step + 1, config.steps, r.loss, eval, scale,
                  m[schema::kTokensPerS],
                  double(mem.peak_bytes) / (1 << 20),
                  100.0 * r.phases.comm_exposed_s / std::max(1e-9, r.step_time_s), wait,
                  m[schema::kCpuUtil], eta);
      std::fflush(stdout);
    }
  };

  const auto outcome = train::train(config, world, hooks);
  if (rank == 0 && config.precision == "fp16")
    std::printf("[hlp-train] fp16 loss scaling: %lld of %zu steps skipped (gradient overflow)\n",
                (long long)outcome.skipped_steps, outcome.losses.size());
  if (writer && outcome.pipeline) writer->write_pipeline(*outcome.pipeline);  // same on all ranks
  if (writer && outcome.context_parallel) writer->write_context_parallel(*outcome.context_parallel);
  if (rank == 0 && outcome.context_parallel && outcome.context_parallel->steps > 0) {
    // what the sequence split cost: bytes per step and rank (mean over ranks), and the balance
    // of the ring-attention tiles (most / mean over ranks)
    const auto& cp = *outcome.context_parallel;
    const size_t kinds = cp.exchange_kinds.size(), n = cp.attention_s.size();
    std::string line;
    for (size_t k = 0; k < kinds; ++k) {
      double bytes = 0;
      for (size_t r = 0; r < n; ++r)
        bytes += double(cp.bytes_sent[r * kinds * 2 + k * 2] + cp.bytes_sent[r * kinds * 2 + k * 2 + 1]);
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
    std::printf("[hlp-train] cp %lld (%s): sent per rank and step (forward + backward): %s; "
                "ring-attention score pairs most / mean over ranks %.3f; G state chain %.3f s "
                "a step (most over ranks, waits included)\n",
                (long long)cp.cp, cp.layout.c_str(), line.c_str(), mean > 0 ? most / mean : 1.0,
                chain);
  }
  int exit_code = 0;
  if (!outcome.non_finite.empty()) {
    exit_code = train::kExitNonFinite;
    if (writer) {  // readable, the steps before this one, complete = 0
      writer->flush();
      writer->set_stopped_reason("non-finite: " + outcome.non_finite);
    }
    if (rank == 0)
      std::fprintf(stderr, "hlp-train: error: %s; stopped before the update on every rank "
                   "(lower --lr or check the data); exit %d\n",
                   outcome.non_finite.c_str(), exit_code);
  } else if (outcome.stopped_by_signal) {
    exit_code = train::kExitCheckpointedOnSignal;
    if (writer) {  // readable, complete = 0
      writer->flush();
      writer->set_stopped_reason("signal: SIGTERM/SIGUSR1, " +
                                 std::string(config.checkpoint_dir.empty()
                                                 ? "no checkpoint (no --checkpoint-dir)"
                                                 : "checkpoint saved"));
    }
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
