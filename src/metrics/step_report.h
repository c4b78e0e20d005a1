#pragma once
// One finished training step as a rank saw it, and how it becomes the result file's step
// metrics (schema.h): step_metric_fields() is the table of every metric read straight off the
// report; step_metrics() applies it and adds the derived ones (memory categories, throughput,
// MFU). The trainer fills a StepReport; hlp-train's result writer stores step_metrics(). Plain
// data, no LibTorch.
#include <cmath>
#include <cstdint>
#include <vector>

#include "metrics/memory.h"
#include "metrics/trace_event.h"

namespace hlp::metrics {

struct StepReport {
  int64_t step = 0;
  double loss = 0.0;                // global mean loss (same on every rank)
  double eval_loss = std::nan("");  // held-out loss, every --eval-every steps (NaN otherwise)
  double lr = 0.0;
  double grad_norm = 0.0;  // of the true (unscaled) gradients; inf / nan on an fp16 overflow
  double loss_scale = 1.0;  // fp16: the scale this step's backward used (1 otherwise)
  bool step_skipped = false;  // fp16: gradients overflowed, no optimizer update this step
  // Every second of the step on the compute thread, attributed once:
  //   step_time_s = data_wait_s + forward_s + backward_s + optimizer_s   (compute)
  //               + comm_exposed_s + pipeline_wait_s                   (blocked)
  //               + other_s   (the rest: batch layout, zero_grad, eval, loss bookkeeping)
  double step_time_s = 0.0;
  double data_wait_s = 0.0;
  double forward_s = 0.0;
  double backward_s = 0.0;
  double optimizer_s = 0.0;      // optimizer compute; the grad-norm all-reduce counts as comm
  double comm_exposed_s = 0.0;   // blocked in collectives
  double all_to_all_exposed_s = 0.0;  // of comm_exposed_s: blocked in all-to-all
  double pipeline_wait_s = 0.0;  // blocked in point-to-point: waiting for a neighbour stage
  double other_s = 0.0;
  // CPU seconds over the step: the whole process, the compute thread, the loader threads and
  // the communication threads (BLAS / OpenMP workers are in cpu_s but in none of the others).
  double cpu_s = 0.0, compute_cpu_s = 0.0, loader_cpu_s = 0.0, comm_cpu_s = 0.0;
  int64_t optimizer_bytes = 0;
  int64_t tokens_local = 0;   // tokens this rank processed (B*M*T, / cp under context parallelism)
  int64_t tokens_global = 0;  // G * T
  // Predicted activation peak of this rank (train/activation_model.h; NaN where not probed).
  double activation_predicted_bytes = std::nan("");
  // Models with sparse MoE layers (schema.h): the worst layer's routing imbalance (global), the
  // bytes this rank sent by all-to-all (its time blocked there: all_to_all_exposed_s above,
  // written for these models only), and every sparse layer's slots per expert over every
  // rank ([layers x experts], the same on every rank; not a step metric: /experts).
  double expert_imbalance = std::nan("");
  double all_to_all_bytes = 0;
  std::vector<int64_t> expert_tokens;
  // Filled after the step by whoever measures them (hlp-train's step hook):
  double comm_bytes = 0;       // payload bytes this rank sent during the step
  int64_t param_bytes = 0;     // what the strategy holds (Strategy::held_bytes)
  int64_t grad_bytes = 0;
  MemoryStats memory;          // the allocator's view of the step
};

// What the mapping needs of the run (constant over its steps).
struct StepRun {
  int devices = 1;                     // world size: throughput per device, MFU's denominator
  double flops_per_token_model = 0;    // model FLOPs convention (accounting.h)
  double flops_per_token_executed = 0;
  double peak_flops_per_device = 0;    // <= 0: MFU is NaN
  bool bf16 = false;                   // --precision bf16
  bool cuda = false;                   // also the caching allocator's reserved bytes, host RSS
};

// A step metric read straight off the report.
struct StepMetricField {
  const char* name;  // schema.h
  double (*value)(const StepReport&);
};
const std::vector<StepMetricField>& step_metric_fields();

// Every step metric hlp-train records for `r`: the table above, precision_bf16, expert_imbalance,
// all_to_all_bytes and all_to_all_exposed_s where the step has expert_tokens (a model with
// sparse layers), the memory
// categories (fill_memory_metrics), throughput and MFU (fill_throughput_metrics) and, on CUDA,
// reserved_bytes, reserved_peak_bytes and host_rss_bytes (`host_rss_bytes` given by the caller).
StepMetrics step_metrics(const StepReport& r, const StepRun& run, int64_t host_rss_bytes = 0);

// Step metrics hlp-train writes beyond schema::kStepMetrics (WriterOptions::extra_metrics).
// `moe`: the model has sparse layers (expert_imbalance, all_to_all_bytes, all_to_all_exposed_s).
std::vector<const char*> step_extra_metrics(bool cuda, bool moe = false);

}  // namespace hlp::metrics
