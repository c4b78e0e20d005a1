#pragma once
// Grouping runs into configurations and reducing each group to one table row.
//
// Rules (also in analysis/README.md):
//  - warm-up: the first `warmup_steps` steps of EACH file are left out (at least its last step
//    is always kept, as the writer's /summary does);
//  - reruns of one configuration POOL their post-warm-up steps (each step already reduced over
//    ranks: max for times/bytes, min for throughput/MFU, mean for loss), then the median and the
//    min/max of the pool are taken. Pooling weights each run by its step count;
//  - peak_bytes is the maximum over ranks, steps (after warm-up) and runs: a peak is a peak;
//  - exposed comm fraction: median over pooled steps of comm_exposed_s / step_time_s;
//  - bubble fraction: median over the group's runs that have /pipeline; the trace-measured one
//    (trace_bubble.h): per run the mean over pipelines, stages and post-warm-up steps, then the
//    median over the group's runs that have such a value;
//  - tokens/s per device = global tokens/s / world size;
//  - skipped steps (fp16 overflow): summed over runs and all their steps, warm-up included;
//  - expert load (sparse MoE layers): /experts' slots per layer and expert, summed over the
//    runs' steps (warm-up included: routing is not timed).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/run_loader.h"

namespace hlp::analysis {

struct Stat {
  double median = 0.0, min = 0.0, max = 0.0;
  double q1 = 0.0, q3 = 0.0;  // quartiles of the pool (linear interpolation): the step-to-step spread
  int64_t n = 0;  // pooled values (0: metric absent -> NaN everywhere)
};

struct ConfigRow {
  std::map<std::string, std::string> config;  // config_columns()
  int64_t runs = 0;             // files combined
  int64_t incomplete_runs = 0;  // of which complete = 0 (only with --include-incomplete)
  int64_t oversubscribed_runs = 0;  // of which ran with more compute threads than cores
  int64_t steps_used = 0;       // pooled steps after warm-up
  std::map<std::string, Stat> stats;  // metric -> stat over the pooled post-warm-up steps
  double peak_bytes_max = 0.0;
  // hlp-plan's prediction for the configuration (NaN where the runs carry none): its peak per
  // rank, max over ranks, steps and runs as peak_bytes_max; its tokens/s, median over runs
  double predicted_peak_bytes_max = 0.0;
  double plan_tokens_per_s = 0.0;
  double comm_exposed_fraction = 0.0;  // NaN when absent
  double pipeline_wait_fraction = 0.0; // median of pipeline_wait_s / step_time_s; NaN when absent
  double bubble_fraction = 0.0;        // NaN when no /pipeline (the strategy's own timers)
  double bubble_fraction_trace = 0.0;  // NaN when no pipeline run of the row has a trace
  double bubble_fraction_theory = 0.0; // NaN when no /pipeline
  double bubble_fraction_simulated = 0.0;  // NaN when no /pipeline or an older file
  double bubble_fraction_replay = 0.0;     // the trace's durations replayed (trace_bubble.h)
  double bubble_fraction_step_theory = 0.0;  // the tables at each step's stage costs (same)
  double final_loss = 0.0;             // mean over runs of the last step's loss
  // fp16 loss scaling: steps whose update was skipped (gradient overflow), summed over the
  // row's runs and ALL their steps (warm-up included); NaN when no run recorded step_skipped.
  double skipped_steps = 0.0;
  // Device-hours the row's runs held: Σ over runs of (end_time − start_time) × world size / 3600
  // (GPU-hours on cuda, rank-hours on cpu); NaN when a run has no end time (killed, incomplete).
  double device_hours = 0.0;
  // Sparse MoE layers: the slots each layer routed to each expert, summed over the row's runs
  // (and their /experts steps, warm-up included); empty for dense models.
  ExpertLoad expert_load;
  // loss per step number, mean over runs holding that step (all steps, warm-up included)
  std::map<int64_t, double> loss_curve;
  std::vector<std::string> paths;

  int64_t world_size() const;
  int64_t config_int(const std::string& column) const;  // -1 when not a number
  const std::string& value(const std::string& column) const;
  double median(const std::string& metric) const;  // NaN when absent
};

// Groups by RunData::key(), one row per configuration, sorted by the configuration columns
// (numbers compared as numbers).
std::vector<ConfigRow> aggregate(const std::vector<RunData>& runs, int64_t warmup_steps);

double median_of(std::vector<double> values);  // NaN for an empty set
// The p-quantile (0 <= p <= 1) with linear interpolation between order statistics; NaN if empty.
double quantile_of(std::vector<double> values, double p);

// A run's trace-measured bubble over its post-warm-up steps: the mean over pipelines, stages
// and those steps (Σ sum / Σ count of TraceBubble); NaN when it has none (no trace, no pipeline).
double run_trace_bubble(const RunData& run, int64_t warmup_steps);
// The same steps replayed through the schedule's tables (trace_bubble.h); NaN when none was.
double run_trace_bubble_replay(const RunData& run, int64_t warmup_steps);
// The tables at each step's mean per-chunk costs (trace_bubble.h "step theory"); NaN when none.
double run_trace_bubble_step_theory(const RunData& run, int64_t warmup_steps);

}  // namespace hlp::analysis
