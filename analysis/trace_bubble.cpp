#include "analysis/trace_bubble.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"

namespace hlp::analysis {
namespace {

using Intervals = std::vector<std::pair<double, double>>;

bool is_stage_compute(const metrics::TraceEvent& e) {
  // zb-h1 splits a backward into backward_input (B) and backward_weight (W)
  return e.lane == metrics::Lane::Compute &&
         (e.name == "forward" || e.name == "backward" || e.name == "backward_input" ||
          e.name == "backward_weight");
}

}  // namespace

double union_length(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0.0;
  double open_start = 0.0, open_end = -std::numeric_limits<double>::infinity();
  for (const auto& [start, end] : intervals) {
    if (end <= start) continue;
    if (start > open_end) {  // disjoint from the run being merged: close it
      if (open_end > open_start) total += open_end - open_start;
      open_start = start;
      open_end = end;
    } else {
      open_end = std::max(open_end, end);
    }
  }
  if (open_end > open_start) total += open_end - open_start;
  return total;
}

TraceBubble trace_bubble(const std::vector<std::vector<metrics::TraceEvent>>& events_per_rank,
                         const std::array<int64_t, 3>& mesh,
                         const std::vector<int64_t>& step_numbers,
                         const ScheduleInfo* schedule) {
  const int64_t dp = mesh[0], pp = mesh[1], tp = mesh[2];
  int64_t ranks = 0;  // the mesh comes from the file: its product may overflow
  if (dp < 1 || pp < 1 || tp < 1 || __builtin_mul_overflow(dp, pp, &ranks) ||
      __builtin_mul_overflow(ranks, tp, &ranks) || ranks != int64_t(events_per_rank.size()))
    throw user_error("mesh dp=", dp, " pp=", pp, " tp=", tp, " does not match ",
                     events_per_rank.size(), " ranks of trace (damaged file)");
  const size_t steps = step_numbers.size();
  std::unordered_map<int64_t, size_t> column_of_step;
  for (size_t i = 0; i < steps; ++i) column_of_step.emplace(step_numbers[i], i);

  // spans[rank][column]: the rank's forward/backward spans of that step
  std::vector<std::vector<Intervals>> spans(events_per_rank.size(), std::vector<Intervals>(steps));
  for (size_t r = 0; r < events_per_rank.size(); ++r)
    for (const auto& e : events_per_rank[r]) {
      if (!is_stage_compute(e)) continue;
      auto it = column_of_step.find(e.step);
      if (it != column_of_step.end()) spans[r][it->second].emplace_back(e.start_s, e.end_s);
    }

  TraceBubble out;
  out.sum.assign(steps, 0.0);
  out.count.assign(steps, 0);
  out.replay_sum.assign(steps, 0.0);
  out.replay_count.assign(steps, 0);
  out.step_theory_sum.assign(steps, 0.0);
  out.step_theory_count.assign(steps, 0);
  // The tables to replay, when the file names a schedule they can be built for (a damaged
  // /pipeline only loses the replay).
  std::optional<parallel::PipeSpec> spec;
  int64_t actions_per_stage = -1;
  if (schedule && pp <= std::numeric_limits<int>::max() &&
      schedule->virtual_chunks >= 1 && schedule->virtual_chunks <= 1 << 16 &&
      schedule->micro_batches >= 1 && schedule->micro_batches <= 1 << 20) {
    parallel::PipeSpec s;
    s.stages = int(pp);
    s.chunks = int(schedule->virtual_chunks);
    s.micro_batches = int(schedule->micro_batches);
    try {  // the file's text: an unknown schedule only loses the replay
      s.schedule = parallel::parse_pipe_schedule(schedule->schedule);
      actions_per_stage = parallel::stage_action_count(s);
      spec = s;
    } catch (const UserError&) {
    }
  }
  bool any_span = false;
  for (const auto& rank_spans : spans)
    for (const auto& s : rank_spans) any_span = any_span || !s.empty();
  if (!any_span) return out;  // no trace (tracing off): nothing to measure, nothing left out

  for (int64_t d = 0; d < dp; ++d)
    for (int64_t t = 0; t < tp; ++t)
      for (size_t col = 0; col < steps; ++col) {
        double window_start = std::numeric_limits<double>::infinity();
        double window_end = -std::numeric_limits<double>::infinity();
        bool every_stage = true;
        for (int64_t i = 0; i < pp; ++i) {
          const Intervals& s = spans[size_t((d * pp + i) * tp + t)][col];
          every_stage = every_stage && !s.empty();
          for (const auto& [start, end] : s) {
            window_start = std::min(window_start, start);
            window_end = std::max(window_end, end);
          }
        }
        const double window_s = window_end - window_start;
        if (!every_stage || !(window_s > 0.0)) {
          ++out.left_out;
          continue;
        }
        bool replayable = spec.has_value();
        std::vector<std::vector<double>> durations;
        for (int64_t i = 0; i < pp; ++i) {
          Intervals s = spans[size_t((d * pp + i) * tp + t)][col];
          const double busy_s = union_length(s);
          out.sum[col] += 1.0 - busy_s / window_s;
          out.count[col] += 1;
          replayable = replayable && int64_t(s.size()) == actions_per_stage;
          if (!replayable) continue;
          std::sort(s.begin(), s.end());
          durations.emplace_back();
          for (const auto& [start, end] : s) durations.back().push_back(std::max(0.0, end - start));
        }
        if (replayable) {
          // every stage's idle share of the simulated step into (sums, counts) of this step
          auto add = [&](const parallel::PipeSimulation& sim, std::vector<double>& sums,
                         std::vector<int64_t>& counts) {
            for (double idle : sim.idle) {
              sums[col] += sim.makespan > 0 ? idle / sim.makespan : 0.0;
              counts[col] += 1;
            }
          };
          add(parallel::replay(*spec, durations), out.replay_sum, out.replay_count);
          add(parallel::simulate(*spec, parallel::mean_costs(*spec, durations)),
              out.step_theory_sum, out.step_theory_count);
        }
      }
  return out;
}

}  // namespace hlp::analysis
