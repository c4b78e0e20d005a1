#include "analysis/aggregate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "metrics/schema.h"

namespace hlp::analysis {
namespace schema = metrics::schema;
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Stat stat_of(const std::vector<double>& pool) {
  Stat s;
  std::vector<double> v;
  for (double x : pool)
    if (!std::isnan(x)) v.push_back(x);
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) {
    s.median = s.min = s.max = s.q1 = s.q3 = kNaN;
    return s;
  }
  s.median = median_of(v);
  s.q1 = quantile_of(v, 0.25);
  s.q3 = quantile_of(v, 0.75);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

// Indices of the steps used after warm-up: [first, steps), never empty for steps > 0.
size_t first_used_step(size_t steps, int64_t warmup_steps) {
  const size_t w = static_cast<size_t>(std::max<int64_t>(0, warmup_steps));
  return std::min(w, steps - 1);
}

bool numeric(const std::string& s, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool config_less(const ConfigRow& a, const ConfigRow& b) {
  for (const auto& c : config_columns()) {
    const std::string& x = a.value(c);
    const std::string& y = b.value(c);
    if (x == y) continue;
    double dx, dy;
    if (numeric(x, &dx) && numeric(y, &dy)) return dx < dy;
    return x < y;
  }
  return false;
}
}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile_of(std::vector<double> v, double p) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 1.0) * double(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

namespace {

double mean_over_used_steps(const std::vector<double>& sums, const std::vector<int64_t>& counts,
                            size_t steps, int64_t warmup_steps) {
  if (steps == 0 || sums.size() != steps || counts.size() != steps) return kNaN;
  double sum = 0.0;
  int64_t count = 0;
  for (size_t s = first_used_step(steps, warmup_steps); s < steps; ++s) {
    sum += sums[s];
    count += counts[s];
  }
  return count > 0 ? sum / double(count) : kNaN;
}

}  // namespace

double run_trace_bubble(const RunData& run, int64_t warmup_steps) {
  return mean_over_used_steps(run.trace_bubble.sum, run.trace_bubble.count,
                              run.step_numbers.size(), warmup_steps);
}

double run_trace_bubble_replay(const RunData& run, int64_t warmup_steps) {
  return mean_over_used_steps(run.trace_bubble.replay_sum, run.trace_bubble.replay_count,
                              run.step_numbers.size(), warmup_steps);
}

double run_trace_bubble_step_theory(const RunData& run, int64_t warmup_steps) {
  return mean_over_used_steps(run.trace_bubble.step_theory_sum,
                              run.trace_bubble.step_theory_count, run.step_numbers.size(),
                              warmup_steps);
}

int64_t ConfigRow::world_size() const { return config_int("world_size"); }

int64_t ConfigRow::config_int(const std::string& column) const {
  double d;
  return numeric(value(column), &d) ? static_cast<int64_t>(d) : -1;
}

const std::string& ConfigRow::value(const std::string& column) const {
  static const std::string unknown = "?";
  auto it = config.find(column);
  return it == config.end() ? unknown : it->second;
}

double ConfigRow::median(const std::string& metric) const {
  auto it = stats.find(metric);
  return it == stats.end() ? kNaN : it->second.median;
}

std::vector<ConfigRow> aggregate(const std::vector<RunData>& runs, int64_t warmup_steps) {
  std::map<std::string, std::vector<const RunData*>> groups;
  for (const auto& r : runs) groups[r.key()].push_back(&r);

  std::vector<ConfigRow> rows;
  for (const auto& [key, members] : groups) {
    ConfigRow row;
    row.config = members.front()->config;
    std::map<std::string, std::vector<double>> pool;
    std::vector<double> comm_fraction, wait_fraction, bubbles, bubbles_trace, bubble_theory,
        bubble_simulated, bubbles_replay, bubbles_step_theory, last_losses;
    std::map<int64_t, std::pair<double, int64_t>> loss_sum;  // step -> (sum, n)
    double peak = kNaN, skipped = kNaN, predicted_peak = kNaN;
    std::vector<double> plan_tokens;
    double device_hours = 0.0;
    for (const RunData* r : members) {
      device_hours += r->wall_s * double(r->config_int("world_size")) / 3600.0;  // NaN sticks
      ++row.runs;
      if (!r->complete) ++row.incomplete_runs;
      if (r->oversubscribed) ++row.oversubscribed_runs;
      row.paths.push_back(r->path);
      const size_t steps = r->step_numbers.size();
      const size_t first = first_used_step(steps, warmup_steps);
      row.steps_used += static_cast<int64_t>(steps - first);
      for (const auto& [metric, values] : r->per_step)
        pool[metric].insert(pool[metric].end(), values.begin() + first, values.end());
      auto st = r->per_step.find(schema::kStepTime);
      auto ce = r->per_step.find(schema::kCommExposed);
      if (st != r->per_step.end() && ce != r->per_step.end())
        for (size_t s = first; s < steps; ++s)
          if (st->second[s] > 0.0) comm_fraction.push_back(ce->second[s] / st->second[s]);
      auto pw = r->per_step.find(schema::kPipelineWait);
      if (st != r->per_step.end() && pw != r->per_step.end())
        for (size_t s = first; s < steps; ++s)
          if (st->second[s] > 0.0) wait_fraction.push_back(pw->second[s] / st->second[s]);
      auto pk = r->per_step.find(schema::kPeakBytes);
      if (pk != r->per_step.end())
        for (size_t s = first; s < steps; ++s)
          if (!std::isnan(pk->second[s])) peak = std::isnan(peak) ? pk->second[s] : std::max(peak, pk->second[s]);
      auto pp = r->per_step.find(kPredictedPeak);
      if (pp != r->per_step.end())
        for (size_t s = first; s < steps; ++s)
          if (!std::isnan(pp->second[s]))
            predicted_peak = std::isnan(predicted_peak) ? pp->second[s] : std::max(predicted_peak, pp->second[s]);
      if (!std::isnan(r->plan_tokens_per_s)) plan_tokens.push_back(r->plan_tokens_per_s);
      auto loss = r->per_step.find(schema::kLoss);
      if (loss != r->per_step.end()) {
        if (!std::isnan(loss->second.back())) last_losses.push_back(loss->second.back());
        for (size_t s = 0; s < steps; ++s) {
          if (std::isnan(loss->second[s])) continue;
          auto& acc = loss_sum[r->step_numbers[s]];
          acc.first += loss->second[s];
          acc.second += 1;
        }
      }
      auto sk = r->per_step.find(schema::kStepSkipped);
      if (sk != r->per_step.end())
        for (double v : sk->second)
          if (!std::isnan(v)) skipped = (std::isnan(skipped) ? 0.0 : skipped) + (v > 0 ? 1 : 0);
      if (r->bubble_fraction) bubbles.push_back(*r->bubble_fraction);
      if (r->bubble_fraction_theory) bubble_theory.push_back(*r->bubble_fraction_theory);
      if (r->bubble_fraction_simulated) bubble_simulated.push_back(*r->bubble_fraction_simulated);
      const double trace_bubble = run_trace_bubble(*r, warmup_steps);
      if (!std::isnan(trace_bubble)) bubbles_trace.push_back(trace_bubble);
      const double replayed = run_trace_bubble_replay(*r, warmup_steps);
      if (!std::isnan(replayed)) bubbles_replay.push_back(replayed);
      const double step_theory = run_trace_bubble_step_theory(*r, warmup_steps);
      if (!std::isnan(step_theory)) bubbles_step_theory.push_back(step_theory);
      // pooled over the runs with the first's sparse layers and experts (reruns of a preset all
      // have them; a custom model's MoE sizes are not configuration columns)
      const ExpertLoad& load = r->expert_load;
      if (row.expert_load.empty()) row.expert_load = load;
      else if (load.layers == row.expert_load.layers && load.experts == row.expert_load.experts)
        for (size_t i = 0; i < load.tokens.size(); ++i) row.expert_load.tokens[i] += load.tokens[i];
    }
    for (const auto& [metric, values] : pool) row.stats[metric] = stat_of(values);
    row.peak_bytes_max = peak;
    row.predicted_peak_bytes_max = predicted_peak;
    row.plan_tokens_per_s = median_of(plan_tokens);
    row.skipped_steps = skipped;
    row.device_hours = device_hours;
    row.comm_exposed_fraction = median_of(comm_fraction);
    row.pipeline_wait_fraction = median_of(wait_fraction);
    row.bubble_fraction = median_of(bubbles);
    row.bubble_fraction_theory = median_of(bubble_theory);
    row.bubble_fraction_simulated = median_of(bubble_simulated);
    row.bubble_fraction_replay = median_of(bubbles_replay);
    row.bubble_fraction_step_theory = median_of(bubbles_step_theory);
    row.bubble_fraction_trace = median_of(bubbles_trace);
    double loss_total = 0.0;
    for (double l : last_losses) loss_total += l;
    row.final_loss = last_losses.empty() ? kNaN : loss_total / double(last_losses.size());
    for (const auto& [step, acc] : loss_sum) row.loss_curve[step] = acc.first / double(acc.second);
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), config_less);
  return rows;
}

}  // namespace hlp::analysis
