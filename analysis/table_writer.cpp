#include "analysis/table_writer.h"

#include <charconv>
#include <cmath>
#include <functional>

#include "analysis/number_text.h"
#include "metrics/schema.h"

namespace hlp::analysis {
namespace schema = metrics::schema;
namespace {

struct MetricColumn {
  std::string csv_name;
  std::function<double(const ConfigRow&)> value;
};

double stat_field(const ConfigRow& r, const std::string& metric, int which) {
  auto it = r.stats.find(metric);
  if (it == r.stats.end() || it->second.n == 0) return std::nan("");
  return which == 0 ? it->second.median : which == 1 ? it->second.min : it->second.max;
}

const std::vector<MetricColumn>& metric_columns() {
  static const std::vector<MetricColumn> cols = [] {
    std::vector<MetricColumn> c;
    auto triple = [&](const std::string& m) {
      c.push_back({m + "_median", [m](const ConfigRow& r) { return stat_field(r, m, 0); }});
      c.push_back({m + "_min", [m](const ConfigRow& r) { return stat_field(r, m, 1); }});
      c.push_back({m + "_max", [m](const ConfigRow& r) { return stat_field(r, m, 2); }});
    };
    auto median = [&](const std::string& m) {
      c.push_back({m + "_median", [m](const ConfigRow& r) { return stat_field(r, m, 0); }});
    };
    triple(schema::kStepTime);
    triple(schema::kTokensPerS);
    c.push_back({"tokens_per_s_per_device_median", [](const ConfigRow& r) {
                   return stat_field(r, schema::kTokensPerS, 0) / double(r.world_size());
                 }});
    c.push_back({"peak_bytes_max", [](const ConfigRow& r) { return r.peak_bytes_max; }});
    c.push_back({"predicted_peak_bytes_max", [](const ConfigRow& r) { return r.predicted_peak_bytes_max; }});
    c.push_back({"predicted_over_measured_peak", [](const ConfigRow& r) {
                   return r.predicted_peak_bytes_max / r.peak_bytes_max;
                 }});
    c.push_back({"predicted_tokens_per_s", [](const ConfigRow& r) { return r.plan_tokens_per_s; }});
    c.push_back({"predicted_over_measured_tokens_per_s", [](const ConfigRow& r) {
                   return r.plan_tokens_per_s / stat_field(r, schema::kTokensPerS, 0);
                 }});
    for (const char* m : {schema::kParamBytes, schema::kGradBytes, schema::kOptimizerBytes,
                          schema::kActivationBytes, schema::kActivationPredicted})
      median(m);
    for (const char* m : {schema::kDataWait, schema::kForward, schema::kBackward,
                          schema::kOptimizer, schema::kCommExposed})
      median(m);
    c.push_back({"comm_exposed_fraction", [](const ConfigRow& r) { return r.comm_exposed_fraction; }});
    median(schema::kPipelineWait);
    c.push_back({"pipeline_wait_fraction", [](const ConfigRow& r) { return r.pipeline_wait_fraction; }});
    median(schema::kOther);
    median(schema::kCpuUtil);
    median(schema::kCommBytes);
    // sparse MoE models only (empty elsewhere): the step's worst layer's routing imbalance, and
    // the all-to-all bytes of the fullest rank in MiB
    median(schema::kExpertImbalance);
    c.push_back({"all_to_all_mib_per_step_median", [](const ConfigRow& r) {
                   return stat_field(r, schema::kAllToAllBytes, 0) / (1024.0 * 1024.0);
                 }});
    median(schema::kMfuModel);
    median(schema::kMfuExecuted);
    c.push_back({"bubble_fraction", [](const ConfigRow& r) { return r.bubble_fraction; }});
    c.push_back({"bubble_fraction_trace", [](const ConfigRow& r) { return r.bubble_fraction_trace; }});
    c.push_back({"bubble_fraction_theory", [](const ConfigRow& r) { return r.bubble_fraction_theory; }});
    c.push_back({"bubble_fraction_simulated", [](const ConfigRow& r) { return r.bubble_fraction_simulated; }});
    c.push_back({"bubble_fraction_replay", [](const ConfigRow& r) { return r.bubble_fraction_replay; }});
    c.push_back({"bubble_fraction_step_theory", [](const ConfigRow& r) { return r.bubble_fraction_step_theory; }});
    c.push_back({"final_loss", [](const ConfigRow& r) { return r.final_loss; }});
    c.push_back({"skipped_steps", [](const ConfigRow& r) { return r.skipped_steps; }});
    c.push_back({"device_hours", [](const ConfigRow& r) { return r.device_hours; }});
    c.push_back({"oversubscribed_runs", [](const ConfigRow& r) { return double(r.oversubscribed_runs); }});
    return c;
  }();
  return cols;
}

// a Markdown cell: empty where the value is absent (md_or_dash shows "–")
std::string cell(const char* f, double v) { return fmt_or(f, v, ""); }

// The shortest text that reads back as the same double: full precision without noise digits
// (0.4, not 0.40000000000000002).
std::string full_precision(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string md_or_dash(const std::string& s) { return s.empty() ? "–" : s; }

}  // namespace

const std::vector<std::string>& csv_metric_columns() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& c : metric_columns()) n.push_back(c.csv_name);
    return n;
  }();
  return names;
}

void write_csv(std::ostream& out, const std::vector<ConfigRow>& rows) {
  std::string header;
  for (const auto& c : config_columns()) header += c + ",";
  header += "runs,incomplete_runs,steps_used";
  for (const auto& c : metric_columns()) header += "," + c.csv_name;
  out << header << "\n";
  for (const auto& r : rows) {
    for (const auto& c : config_columns()) out << csv_cell(r.value(c)) << ",";
    out << r.runs << "," << r.incomplete_runs << "," << r.steps_used;
    for (const auto& c : metric_columns()) out << "," << full_precision(c.value(r));
    out << "\n";
  }
}

void write_markdown(std::ostream& out, const std::vector<ConfigRow>& rows, int64_t warmup_steps) {
  // Columns that do not apply to any row ("-": pp_split without a pipeline) are left out;
  // configuration columns equal in every row go to one line above the table.
  std::vector<std::string> varying, common;
  for (const auto& c : config_columns()) {
    bool same = true, applies = false;
    for (const auto& r : rows) {
      same = same && r.value(c) == rows.front().value(c);
      applies = applies || r.value(c) != "-";
    }
    if (!applies) continue;
    (same && rows.size() > 1 ? common : varying).push_back(c);
  }
  if (!common.empty()) {
    out << "Common to all rows:";
    for (size_t i = 0; i < common.size(); ++i)
      out << (i ? ", " : " ") << common[i] << " = " << rows.front().value(common[i]);
    out << "\n\n";
  }
  bool any_pipeline = false, any_oversubscribed = false, any_skipped_column = false, any_moe = false;
  for (const auto& r : rows) {
    any_skipped_column = any_skipped_column || !std::isnan(r.skipped_steps);
    any_moe = any_moe || !std::isnan(r.median(schema::kExpertImbalance)) ||
              !std::isnan(r.median(schema::kAllToAllBytes));
    any_pipeline = any_pipeline || r.config_int("pp") > 1;
    any_oversubscribed = any_oversubscribed || r.oversubscribed_runs > 0;
  }
  out << "Medians over the steps after the first " << warmup_steps
      << " of each run, reruns pooled; [min–max] over those steps. tok/s is global; "
         "tok/s/dev = global / world size; peak = max over ranks and steps; exposed comm = "
         "time blocked in collectives"
      << (any_pipeline ? ", pipeline wait = time a stage waits for its neighbour" : "")
      << (any_moe ? "; expert imbalance = the step's worst sparse layer's busiest expert / mean "
                    "expert (1 = even), all-to-all = MiB the fullest rank sent by all-to-all"
                  : "")
      << "; cpu = CPU cores busy per rank (process CPU s / wall s).\n\n";

  constexpr double kMiB = 1024.0 * 1024.0;
  using Cell = std::function<std::string(const ConfigRow&)>;
  std::vector<std::pair<std::string, Cell>> cols;
  cols.push_back({"runs", [](const ConfigRow& r) {
                    std::string s = std::to_string(r.runs);
                    if (r.incomplete_runs) s += " (" + std::to_string(r.incomplete_runs) + " incomplete)";
                    if (r.oversubscribed_runs) s += " ⚠";
                    return s;
                  }});
  cols.push_back({"steps", [](const ConfigRow& r) { return std::to_string(r.steps_used); }});
  cols.push_back({"step time ms [min–max]", [](const ConfigRow& r) {
                    const auto st = r.stats.count(schema::kStepTime) ? r.stats.at(schema::kStepTime) : Stat{};
                    return st.n ? cell("%.1f", st.median * 1e3) + " [" + cell("%.1f", st.min * 1e3) +
                                      "–" + cell("%.1f", st.max * 1e3) + "]"
                                : "";
                  }});
  cols.push_back({"tok/s [min–max]", [](const ConfigRow& r) {
                    const auto tp = r.stats.count(schema::kTokensPerS) ? r.stats.at(schema::kTokensPerS) : Stat{};
                    return tp.n ? cell("%.0f", tp.median) + " [" + cell("%.0f", tp.min) + "–" +
                                      cell("%.0f", tp.max) + "]"
                                : "";
                  }});
  cols.push_back({"tok/s/dev", [](const ConfigRow& r) {
                    const auto tp = r.stats.count(schema::kTokensPerS) ? r.stats.at(schema::kTokensPerS) : Stat{};
                    return tp.n ? cell("%.0f", tp.median / double(r.world_size())) : "";
                  }});
  cols.push_back({"peak MiB", [=](const ConfigRow& r) { return cell("%.2f", r.peak_bytes_max / kMiB); }});
  // hlp-plan's predictions (written by hlp-train before its first step), where some row has them
  bool any_plan = false;
  for (const auto& r : rows)
    any_plan = any_plan || !std::isnan(r.predicted_peak_bytes_max) || !std::isnan(r.plan_tokens_per_s);
  if (any_plan) {
    cols.push_back({"peak predicted MiB", [=](const ConfigRow& r) {
                      return cell("%.2f", r.predicted_peak_bytes_max / kMiB);
                    }});
    cols.push_back({"peak pred / meas", [](const ConfigRow& r) {
                      return cell("%.3f", r.predicted_peak_bytes_max / r.peak_bytes_max);
                    }});
    cols.push_back({"tok/s predicted", [](const ConfigRow& r) { return cell("%.0f", r.plan_tokens_per_s); }});
    cols.push_back({"tok/s pred / meas", [](const ConfigRow& r) {
                      return cell("%.2f", r.plan_tokens_per_s / r.median(schema::kTokensPerS));
                    }});
  }
  for (auto [header, metric] : {std::pair{"params MiB", schema::kParamBytes},
                                {"grads MiB", schema::kGradBytes},
                                {"optim MiB", schema::kOptimizerBytes},
                                {"activ. MiB", schema::kActivationBytes}}) {
    const std::string m = metric;
    cols.push_back({header, [=](const ConfigRow& r) { return cell("%.2f", r.median(m) / kMiB); }});
  }
  // hlp-train's prediction (activation_model.h) where some row has it; "–" where not modelled
  bool any_predicted = false;
  for (const auto& r : rows) any_predicted = any_predicted || !std::isnan(r.median(schema::kActivationPredicted));
  if (any_predicted)
    cols.push_back({"activ. predicted MiB", [](const ConfigRow& r) {
                      const double v = r.median(schema::kActivationPredicted);
                      return std::isnan(v) ? std::string("–") : cell("%.2f", v / kMiB);
                    }});
  cols.push_back({"exposed comm %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.comm_exposed_fraction); }});
  if (any_pipeline)
    cols.push_back({"pipeline wait %", [](const ConfigRow& r) {
                      return r.config_int("pp") > 1 ? cell("%.1f", 100.0 * r.pipeline_wait_fraction) : "";
                    }});
  if (any_moe) {  // sparse MoE models; "–" for the dense rows beside them
    cols.push_back({"expert imbalance", [](const ConfigRow& r) {
                      return cell("%.2f", r.median(schema::kExpertImbalance));
                    }});
    cols.push_back({"all-to-all MiB/step", [=](const ConfigRow& r) {
                      return cell("%.2f", r.median(schema::kAllToAllBytes) / kMiB);
                    }});
  }
  cols.push_back({"cpu", [](const ConfigRow& r) { return cell("%.2f", r.median(schema::kCpuUtil)); }});
  cols.push_back({"MFU model %", [](const ConfigRow& r) { return cell("%.2f", 100.0 * r.median(schema::kMfuModel)); }});
  cols.push_back({"MFU exec %", [](const ConfigRow& r) { return cell("%.2f", 100.0 * r.median(schema::kMfuExecuted)); }});
  if (any_pipeline) {
    cols.push_back({"bubble (in-process) %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.bubble_fraction); }});
    cols.push_back({"bubble (trace) %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.bubble_fraction_trace); }});
    cols.push_back({"bubble theory %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.bubble_fraction_theory); }});
    cols.push_back({"bubble simulated %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.bubble_fraction_simulated); }});
    cols.push_back({"bubble step theory %", [](const ConfigRow& r) { return cell("%.1f", 100.0 * r.bubble_fraction_step_theory); }});
  }
  cols.push_back({"final loss", [](const ConfigRow& r) { return cell("%.4f", r.final_loss); }});
  if (any_skipped_column)  // fp16 runs: updates skipped on gradient overflow (all steps)
    cols.push_back({"skipped steps", [](const ConfigRow& r) { return cell("%.0f", r.skipped_steps); }});

  out << "|";
  for (const auto& c : varying) out << " " << c << " |";
  for (const auto& c : cols) out << " " << c.first << " |";
  out << "\n|";
  for (size_t i = 0; i < varying.size(); ++i) out << "---|";
  for (size_t i = 0; i < cols.size(); ++i) out << "---:|";
  out << "\n";
  for (const auto& r : rows) {
    out << "|";
    for (const auto& c : varying) out << " " << md_or_dash(r.value(c) == "-" ? "" : r.value(c)) << " |";
    for (const auto& c : cols) out << " " << md_or_dash(c.second(r)) << " |";
    out << "\n";
  }
  if (any_oversubscribed)
    out << "\n⚠ oversubscribed: the ranks of a node asked for more compute threads than it has "
           "cores (root attribute oversubscribed = 1); those times are inflated and noisy.\n";
}

}  // namespace hlp::analysis
