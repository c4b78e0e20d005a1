#include "cost.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "train/config.h"

namespace hlp::sweep {
namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// "12.3456" hours; the tests parse these numbers.
std::string hours_text(double hours) { return format("%.4f", hours); }

// The configuration's optimizer steps: its `steps`, else hlp-train's default.
int config_steps(const Config& config) {
  const std::string steps = config.value("steps");
  return steps.empty() ? train::TrainConfig{}.steps : std::stoi(steps);  // checked by job_file
}

// Adds `name` to the names not costed for `why`, keeping the order in which reasons appear.
void not_costed(SweepCost& cost, const std::string& why, const std::string& name) {
  for (auto& [reason, names] : cost.not_costed)
    if (reason == why) {
      names.push_back(name);
      return;
    }
  cost.not_costed.push_back({why, {name}});
}

void cost_configs(SweepCost& cost, const Sweep& sweep, const StepTimes& times, int per_rank) {
  for (const Config& config : sweep.configs) {
    auto step = times.step_s.find(config.name);
    if (step == times.step_s.end()) {
      auto why = times.missing_why.find(config.name);
      not_costed(cost, why == times.missing_why.end() ? times.default_missing_why : why->second,
                 config.name);
      continue;
    }
    ConfigCost c;
    c.name = config.name;
    c.devices = config.ranks * per_rank;
    c.steps = config_steps(config);
    c.step_s = step->second;
    const double task_s = c.steps * c.step_s + cost.startup_s;
    c.hours = c.devices * task_s / 3600.0;
    c.over_time_limit = task_s > cost.time_limit_s;
    cost.predicted_hours += c.hours;
    cost.costed.push_back(c);
  }
}

void cost_arrays(SweepCost& cost, const Sweep& sweep, int per_rank) {
  for (const Shape& shape : sweep.shapes) {
    ArrayCost a;
    a.script = shape.name + ".sbatch";
    a.tasks = int(shape.config_indices.size());
    a.devices_per_task = shape.ranks * per_rank;
    a.hours = a.tasks * a.devices_per_task * cost.time_limit_s / 3600.0;
    cost.worst_hours += a.hours;
    cost.arrays.push_back(a);
  }
}

// "1.2345 GPU-hours = 2.4690 SUs", "1.2345 GPU-hours, SUs: no rate" or "1.2345 rank-hours".
std::string amount(const SweepCost& cost, double hours) {
  if (!cost.gpu) return hours_text(hours) + " rank-hours";
  if (!cost.rate) return hours_text(hours) + " GPU-hours, SUs: no rate";
  return hours_text(hours) + " GPU-hours = " + hours_text(hours * cost.rate->su_per_gpu_hour) + " SUs";
}

std::string heading(const SweepCost& cost) {
  std::string line = "cost of sweep '" + cost.sweep + "'";
  if (!cost.gpu) return line + " in rank-hours (CPU ranks: no SUs)";
  line += " on " + (cost.gpu_type.empty() ? std::string("GPUs") : cost.gpu_type + " GPUs");
  if (!cost.rate)
    return line + ", no SU rate for this site and GPU type (set su-per-gpu-hour = R in " +
           cost.site_section + " to see SUs)";
  return line + " at " + cost.rate->text() + " SU/GPU-hour (" + cost.rate->source +
         "; slurm/README.md)";
}

std::string task_formula(const SweepCost& cost) {
  return std::string("a task: ") + (cost.gpu ? "GPUs" : "ranks") +
         " x (steps x hlp-plan's predicted step time + start-up " + format("%g", cost.startup_s) +
         " s); start-up " +
         (cost.startup_measured ? "measured (slurm/README.md), job setting startup-s replaces it"
                                : "from the job file's startup-s");
}

std::string config_line(const SweepCost& cost, const ConfigCost& c) {
  std::string line = "  cost " + c.name + ": " + std::to_string(c.devices) +
                     (cost.gpu ? " GPU(s)" : " rank(s)") + " x (" + std::to_string(c.steps) +
                     " steps x " + format("%.4g", c.step_s) + " s + " + format("%g", cost.startup_s) +
                     " s) = " + amount(cost, c.hours);
  if (c.over_time_limit)
    line += " (longer than the time limit " + cost.time_limit + ": requeued, each resume adds a start-up)";
  return line;
}

std::string array_line(const SweepCost& cost, const ArrayCost& a) {
  return "  worst case " + a.script + ": " + std::to_string(a.tasks) + " task(s) x " +
         std::to_string(a.devices_per_task) + (cost.gpu ? " GPU(s)" : " rank(s)") + " x " +
         cost.time_limit + " = " + amount(cost, a.hours);
}

}  // namespace

double slurm_time_limit_s(const std::string& text, const std::string& where) {
  if (text == "UNLIMITED" || text == "INFINITE" || text == "unlimited" || text == "infinite")
    return std::numeric_limits<double>::infinity();
  auto bad = [&]() {
    return user_error(where, ": 'time = ", text, "' is not a Slurm time limit (minutes, MM:SS, "
                      "HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)");
  };
  std::vector<long> fields;  // the numbers after the day, split at ':'
  long days = -1;
  size_t pos = 0;
  const size_t dash = text.find('-');
  auto number = [&](size_t begin, size_t end) {
    if (begin >= end || end - begin > 9) throw bad();
    for (size_t i = begin; i < end; ++i)
      if (text[i] < '0' || text[i] > '9') throw bad();
    return std::stol(text.substr(begin, end - begin));
  };
  if (dash != std::string::npos) {
    days = number(0, dash);
    pos = dash + 1;
  }
  for (;;) {
    const size_t colon = text.find(':', pos);
    fields.push_back(number(pos, colon == std::string::npos ? text.size() : colon));
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  if (fields.size() > 3) throw bad();
  double seconds = 0;
  if (days >= 0) {  // D-HH, D-HH:MM, D-HH:MM:SS
    while (fields.size() < 3) fields.push_back(0);
    seconds = ((days * 24.0 + fields[0]) * 60 + fields[1]) * 60 + fields[2];
  } else if (fields.size() == 1) {
    seconds = fields[0] * 60.0;  // minutes
  } else if (fields.size() == 2) {
    seconds = fields[0] * 60.0 + fields[1];  // MM:SS
  } else {
    seconds = (fields[0] * 60.0 + fields[1]) * 60 + fields[2];  // HH:MM:SS
  }
  // sbatch: "A time limit of zero requests that no time limit be imposed"
  return seconds > 0 ? seconds : std::numeric_limits<double>::infinity();
}

SweepCost estimate_cost(Site site, const JobFile& job, const Sweep& sweep, const StepTimes& times,
                        const std::string& gpu_type) {
  const std::string s = site_name(site);
  const int per_rank = gpus_per_rank(site, job);
  SweepCost cost;
  cost.sweep = sweep.name;
  cost.gpu = per_rank > 0;
  cost.gpu_type = gpu_type;
  cost.site_section = "[" + s + "]";
  cost.rate = charge_rate(site, job);
  const auto startup = number_setting(job, s, "startup-s", "seconds a task spends outside its steps");
  cost.startup_s = startup.value_or(kMeasuredStartupS);
  cost.startup_measured = !startup;
  cost.time_limit = job.setting(s, "time", kDefaultTimeLimit);
  cost.time_limit_s = slurm_time_limit_s(cost.time_limit, job.path);
  cost_configs(cost, sweep, times, cost.gpu ? per_rank : 1);
  cost_arrays(cost, sweep, cost.gpu ? per_rank : 1);
  return cost;
}

std::vector<std::string> cost_lines(const SweepCost& cost) {
  std::vector<std::string> lines = {heading(cost), "  " + task_formula(cost)};
  for (const ConfigCost& c : cost.costed) lines.push_back(config_line(cost, c));
  for (const auto& [why, names] : cost.not_costed) {
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    lines.push_back("  not costed (no time prediction: " + why + "): " + list);
  }
  size_t uncosted = 0;
  for (const auto& entry : cost.not_costed) uncosted += entry.second.size();
  lines.push_back("  predicted: " + std::to_string(cost.costed.size()) + " configuration(s), " +
                  amount(cost, cost.predicted_hours) +
                  (uncosted ? " (+ " + std::to_string(uncosted) + " not costed, listed above)" : ""));
  if (!std::isfinite(cost.time_limit_s)) {
    lines.push_back("  worst case: none (time = " + cost.time_limit + ")");
    return lines;
  }
  for (const ArrayCost& a : cost.arrays) lines.push_back(array_line(cost, a));
  lines.push_back("  worst case: " + amount(cost, cost.worst_hours) +
                  " (every task runs to its time limit)");
  return lines;
}

}  // namespace hlp::sweep
