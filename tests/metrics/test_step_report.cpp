// The step-to-metrics table (metrics/step_report.h): every field of a step report lands in the
// step metric that names it, every metric hlp-train records is produced, and nothing else.
#include "catch_compat.h"

#include <cmath>
#include <set>
#include <string>

#include "metrics/schema.h"
#include "metrics/step_report.h"

using namespace hlp::metrics;

namespace {

// A report whose fields all differ, so a field mapped to the wrong metric shows.
StepReport distinct_report() {
  StepReport r;
  r.step = 4;
  r.loss = 2.5;
  r.eval_loss = 2.75;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.loss_scale = 1024;
  r.step_skipped = true;
  r.step_time_s = 2.0;
  r.data_wait_s = 0.01;
  r.forward_s = 0.3;
  r.backward_s = 0.6;
  r.optimizer_s = 0.05;
  r.comm_exposed_s = 0.2;
  r.pipeline_wait_s = 0.1;
  r.other_s = 0.74;
  r.cpu_s = 3.0;
  r.compute_cpu_s = 1.9;
  r.loader_cpu_s = 0.07;
  r.comm_cpu_s = 0.3;
  r.optimizer_bytes = 800;
  r.tokens_local = 256;
  r.tokens_global = 1024;
  r.activation_predicted_bytes = 12345;
  r.comm_bytes = 4096;
  r.param_bytes = 1000;
  r.grad_bytes = 100;
  r.memory.current_bytes = 3000;
  r.memory.peak_bytes = 5000;
  r.memory.reserved_bytes = 6000;
  r.memory.reserved_peak_bytes = 7000;
  return r;
}

}  // namespace

TEST_CASE("step metrics: each report field lands in the metric that names it", "[metrics]") {
  StepRun run;
  run.devices = 4;
  run.flops_per_token_model = 6e6;
  run.flops_per_token_executed = 4e6;
  run.peak_flops_per_device = 1e9;
  run.bf16 = true;
  const StepMetrics m = step_metrics(distinct_report(), run);
  CHECK(m.at(schema::kLoss) == 2.5);
  CHECK(m.at(schema::kEvalLoss) == 2.75);
  CHECK(m.at(schema::kLr) == 1e-3);
  CHECK(m.at(schema::kGradNorm) == 0.5);
  CHECK(m.at(schema::kLossScale) == 1024);
  CHECK(m.at(schema::kStepSkipped) == 1);
  CHECK(m.at(schema::kPrecisionBf16) == 1);
  CHECK(m.at(schema::kTokens) == 256);
  CHECK(m.at(schema::kStepTime) == 2.0);
  CHECK(m.at(schema::kDataWait) == 0.01);
  CHECK(m.at(schema::kForward) == 0.3);
  CHECK(m.at(schema::kBackward) == 0.6);
  CHECK(m.at(schema::kOptimizer) == 0.05);
  CHECK(m.at(schema::kCommExposed) == 0.2);
  CHECK(m.at(schema::kPipelineWait) == 0.1);
  CHECK(m.at(schema::kOther) == 0.74);
  CHECK(m.at(schema::kCpu) == 3.0);
  CHECK(m.at(schema::kCpuUtil) == 1.5);  // cores busy: cpu_s / step_time_s
  CHECK(m.at(schema::kComputeCpu) == 1.9);
  CHECK(m.at(schema::kLoaderCpu) == 0.07);
  CHECK(m.at(schema::kCommCpu) == 0.3);
  CHECK(m.at(schema::kCommBytes) == 4096);
  CHECK(m.at(schema::kActivationPredicted) == 12345);
  CHECK(m.at(schema::kParamBytes) == 1000);
  CHECK(m.at(schema::kGradBytes) == 100);
  CHECK(m.at(schema::kOptimizerBytes) == 800);
  CHECK(m.at(schema::kCurrentBytes) == 3000);
  CHECK(m.at(schema::kPeakBytes) == 5000);
  CHECK(m.at(schema::kActivationBytes) == 5000 - (1000 + 100 + 800));
  CHECK(m.at(schema::kTokensPerS) == 512);  // global tokens / step time
  CHECK(m.at(schema::kTokensPerSPerDevice) == 128);
  CHECK(m.at(schema::kMfuModel) == Approx(512 * 6e6 / 4e9));
  CHECK(m.at(schema::kMfuExecuted) == Approx(512 * 4e6 / 4e9));
  CHECK(m.at(schema::kMfu) == m.at(schema::kMfuModel));
  CHECK(m.count(schema::kReservedBytes) == 0);  // CPU run
}

TEST_CASE("step metrics: exactly the contract's metrics and hlp-train's extras", "[metrics]") {
  for (bool cuda : {false, true}) {
    StepRun run;
    run.cuda = cuda;
    const StepMetrics m = step_metrics(distinct_report(), run, /*host_rss_bytes=*/42);
    std::set<std::string> want;
    for (const char* name : schema::kStepMetrics) want.insert(name);
    want.erase(schema::kStepEnd);  // the recorder stamps it (Recorder::record_step)
    for (const char* name : step_extra_metrics(cuda)) want.insert(name);
    std::set<std::string> got;
    for (const auto& [name, value] : m) got.insert(name);
    CHECK(got == want);
    if (cuda) {
      CHECK(m.at(schema::kReservedBytes) == 6000);
      CHECK(m.at(schema::kReservedPeakBytes) == 7000);
      CHECK(m.at(schema::kHostRssBytes) == 42);
    }
  }
  std::set<std::string> fields;  // each metric read off the report once
  for (const auto& f : step_metric_fields()) CHECK(fields.insert(f.name).second);
}

TEST_CASE("step metrics: no peak gives NaN MFU, no step time NaN throughput", "[metrics]") {
  StepReport r = distinct_report();
  StepRun run;
  run.peak_flops_per_device = 0;
  CHECK(std::isnan(step_metrics(r, run).at(schema::kMfu)));
  r.step_time_s = 0;
  const StepMetrics m = step_metrics(r, run);
  CHECK(std::isnan(m.at(schema::kTokensPerS)));
  CHECK(m.at(schema::kCpuUtil) == 0);
}
