#include <unistd.h>

#include <cstdio>
#include <limits>

#include "metrics/memory.h"
#include "metrics/schema.h"

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
