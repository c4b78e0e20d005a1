#include <unistd.h>

#include <cstdio>
#include <limits>

#include "metrics/memory.h"
#include "metrics/schema.h"
#include "metrics/step_report.h"

namespace hlp::metrics {

int64_t host_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long total_pages = 0, resident_pages = 0;
  const int read = std::fscanf(f, "%lld %lld", &total_pages, &resident_pages);
  std::fclose(f);
  return read == 2 ? int64_t(resident_pages) * int64_t(sysconf(_SC_PAGESIZE)) : 0;
}

void fill_memory_metrics(StepMetrics& m, const MemoryStats& measured, const CategoryBytes& parts,
                         int64_t activation_bytes_reported) {
  m[schema::kCurrentBytes] = static_cast<double>(measured.current_bytes);
  m[schema::kPeakBytes] = static_cast<double>(measured.peak_bytes);
  m[schema::kParamBytes] = static_cast<double>(parts.param_bytes);
  m[schema::kGradBytes] = static_cast<double>(parts.grad_bytes);
  m[schema::kOptimizerBytes] = static_cast<double>(parts.optimizer_bytes);
  m[schema::kActivationBytes] =
      activation_bytes_reported >= 0
          ? static_cast<double>(activation_bytes_reported)
          : static_cast<double>(measured.peak_bytes - parts.sum());
}

void fill_throughput_metrics(StepMetrics& m, double global_tokens, double step_time_s,
                             int devices, double flops_per_token_model,
                             double flops_per_token_executed, double peak_flops_per_device) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double tokens_per_s = step_time_s > 0 ? global_tokens / step_time_s : nan;
  const double peak_total = devices > 0 ? devices * peak_flops_per_device : 0.0;
  m[schema::kStepTime] = step_time_s;
  m[schema::kTokensPerS] = tokens_per_s;
  m[schema::kTokensPerSPerDevice] = devices > 0 ? tokens_per_s / devices : nan;
  m[schema::kMfuModel] = peak_total > 0 ? tokens_per_s * flops_per_token_model / peak_total : nan;
  m[schema::kMfuExecuted] =
      peak_total > 0 ? tokens_per_s * flops_per_token_executed / peak_total : nan;
  m[schema::kMfu] = m[schema::kMfuModel];
}

}  // namespace hlp::metrics

namespace hlp::metrics {

const std::vector<StepMetricField>& step_metric_fields() {
  using R = const StepReport&;
  static const std::vector<StepMetricField> fields = {
      {schema::kLoss, [](R r) { return r.loss; }},
      {schema::kTokens, [](R r) { return double(r.tokens_local); }},
      {schema::kDataWait, [](R r) { return r.data_wait_s; }},
      {schema::kForward, [](R r) { return r.forward_s; }},
      {schema::kBackward, [](R r) { return r.backward_s; }},
      {schema::kOptimizer, [](R r) { return r.optimizer_s; }},
      {schema::kCommExposed, [](R r) { return r.comm_exposed_s; }},
      {schema::kPipelineWait, [](R r) { return r.pipeline_wait_s; }},
      {schema::kOther, [](R r) { return r.other_s; }},
      {schema::kCpu, [](R r) { return r.cpu_s; }},
      {schema::kCpuUtil, [](R r) { return r.step_time_s > 0 ? r.cpu_s / r.step_time_s : 0.0; }},
      {schema::kComputeCpu, [](R r) { return r.compute_cpu_s; }},
      {schema::kLoaderCpu, [](R r) { return r.loader_cpu_s; }},
      {schema::kCommCpu, [](R r) { return r.comm_cpu_s; }},
      {schema::kCommBytes, [](R r) { return r.comm_bytes; }},
      {schema::kLr, [](R r) { return r.lr; }},
      {schema::kEvalLoss, [](R r) { return r.eval_loss; }},
      {schema::kLossScale, [](R r) { return r.loss_scale; }},
      {schema::kStepSkipped, [](R r) { return r.step_skipped ? 1.0 : 0.0; }},
      {schema::kActivationPredicted, [](R r) { return r.activation_predicted_bytes; }},
      {schema::kGradNorm, [](R r) { return r.grad_norm; }},
  };
  return fields;
}

StepMetrics step_metrics(const StepReport& r, const StepRun& run, int64_t host_rss) {
  StepMetrics m;
  for (const auto& field : step_metric_fields()) m[field.name] = field.value(r);
  m[schema::kPrecisionBf16] = run.bf16 ? 1.0 : 0.0;
  if (!r.expert_tokens.empty()) {  // a model with sparse MoE layers (step_extra_metrics' moe)
    m[schema::kExpertImbalance] = r.expert_imbalance;
    m[schema::kAllToAllBytes] = r.all_to_all_bytes;
    m[schema::kAllToAllExposed] = r.all_to_all_exposed_s;
  }
  fill_memory_metrics(m, r.memory, CategoryBytes{r.param_bytes, r.grad_bytes, r.optimizer_bytes});
  if (run.cuda) {
    m[schema::kReservedBytes] = double(r.memory.reserved_bytes);
    m[schema::kReservedPeakBytes] = double(r.memory.reserved_peak_bytes);
    m[schema::kHostRssBytes] = double(host_rss);
  }
  fill_throughput_metrics(m, double(r.tokens_global), r.step_time_s, run.devices,
                          run.flops_per_token_model, run.flops_per_token_executed,
                          run.peak_flops_per_device);
  return m;
}

std::vector<const char*> step_extra_metrics(bool cuda, bool moe) {
  std::vector<const char*> extra = {schema::kEvalLoss, schema::kPrecisionBf16, schema::kLossScale,
                                    schema::kStepSkipped, schema::kActivationPredicted};
  if (moe)
    for (const char* m : {schema::kExpertImbalance, schema::kAllToAllBytes, schema::kAllToAllExposed})
      extra.push_back(m);
  // GPU runs: the caching allocator's reserved bytes beside the allocated ones
  // (current_bytes / peak_bytes), and the host's resident memory.
  if (cuda)
    for (const char* m :
         {schema::kReservedBytes, schema::kReservedPeakBytes, schema::kHostRssBytes})
      extra.push_back(m);
  return extra;
}

}  // namespace hlp::metrics
