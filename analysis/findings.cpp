#include "analysis/findings.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <tuple>

#include "analysis/number_text.h"
#include "metrics/schema.h"

namespace hlp::analysis {
namespace schema = metrics::schema;
namespace {

// The mesh is part of the strategy's name (fsdp2+tp2): these never label a competitor.
const std::set<std::string> kNamedByStrategy = {"strategy", "dp", "pp", "tp", "cp", "ep"};

struct Part {
  const char* metric;
  const char* name;
};
const Part kPhases[] = {{schema::kForward, "forward"},
                        {schema::kBackward, "backward"},
                        {schema::kOptimizer, "optimizer"},
                        {schema::kCommExposed, "exposed communication"},
                        {schema::kPipelineWait, "pipeline wait"},
                        {schema::kDataWait, "data wait"},
                        {schema::kOther, "other"}};
const Part kMemoryParts[] = {{schema::kActivationBytes, "activations"},
                             {schema::kParamBytes, "parameters"},
                             {schema::kGradBytes, "gradients"},
                             {schema::kOptimizerBytes, "optimizer state"}};

double zero_if_nan(double v) { return std::isnan(v) ? 0.0 : v; }

// 512 B, 3.4 KiB, 5.5 MiB, 47.4 GiB
std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return fmt(u == 0 ? "%.0f " : "%.1f ", b) + units[u];
}

const Stat* stat(const ConfigRow& r, const char* metric) {
  auto it = r.stats.find(metric);
  return it == r.stats.end() || it->second.n == 0 ? nullptr : &it->second;
}

bool iqr_overlap(const Stat* a, const Stat* b) {
  return a && b && a->q1 <= b->q3 && b->q1 <= a->q3;
}

double tokens_per_step(const ConfigRow& r) {
  return double(r.config_int("global_batch")) * double(r.config_int("seq_len"));
}

std::string group_key(const ConfigRow& r) {
  std::string k;
  for (const auto& c : comparable_columns()) k += r.value(c) + "\x1f";
  return k;
}

std::string group_title(const ConfigRow& r) {
  const bool cpu = r.value("device") == "cpu";
  return r.value("model") + " · " + r.value("device") + " · " + r.value("precision") +
         " (base " + r.value("base_dtype") + ") · T " + r.value("seq_len") + " · " +
         r.value("world_size") + (cpu ? " rank(s)" : " GPU(s)");
}

// Sorting groups: model, device, precision, base dtype, then T and ranks as numbers.
auto group_order(const ConfigRow& r) {
  return std::make_tuple(r.value("model"), r.value("device"), r.value("precision"),
                         r.value("base_dtype"), r.config_int("seq_len"), r.config_int("world_size"));
}

// Columns that tell two configurations of one strategy apart (pp_split between two pipelines,
// act_ckpt between two ddp runs): only those label a competitor.
std::vector<std::string> varying_columns(const std::vector<const ConfigRow*>& rows) {
  std::vector<std::string> out;
  const auto& same = comparable_columns();
  for (const auto& c : config_columns()) {
    if (kNamedByStrategy.count(c) || std::find(same.begin(), same.end(), c) != same.end()) continue;
    bool varies = false;
    for (const ConfigRow* a : rows)
      for (const ConfigRow* b : rows)
        varies = varies || (a->value("strategy") == b->value("strategy") && a->value(c) != b->value(c));
    if (varies) out.push_back(c);
  }
  return out;
}

const ConfigRow* fastest_of(const Group& g) {
  const ConfigRow* best = nullptr;
  for (const ConfigRow* r : g.rows)
    if (!std::isnan(tokens_per_device(*r)) &&
        (!best || tokens_per_device(*r) > tokens_per_device(*best)))
      best = r;
  return best;
}

const ConfigRow* leanest_of(const Group& g) {
  const ConfigRow* best = nullptr;
  for (const ConfigRow* r : g.rows)
    if (!std::isnan(r->peak_bytes_max) && (!best || r->peak_bytes_max < best->peak_bytes_max))
      best = r;
  return best;
}

}  // namespace

const std::vector<std::string>& comparable_columns() {
  static const std::vector<std::string> cols = {"model",      "device",  "precision",
                                                "base_dtype", "seq_len", "world_size"};
  return cols;
}

std::vector<Group> comparable_groups(const std::vector<ConfigRow>& rows) {
  std::map<std::string, Group> by_key;
  std::vector<std::string> keys;
  for (const auto& r : rows) {
    const auto k = group_key(r);
    if (!by_key.count(k)) {
      keys.push_back(k);
      by_key[k].title = group_title(r);
    }
    by_key[k].rows.push_back(&r);
  }
  std::vector<Group> out;
  for (const auto& k : keys) {
    Group g = by_key[k];
    g.varying = varying_columns(g.rows);
    out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(), [](const Group& a, const Group& b) {
    return group_order(*a.rows.front()) < group_order(*b.rows.front());
  });
  return out;
}

std::string competitor_label(const ConfigRow& row, const Group& group) {
  std::string details;
  for (const auto& c : group.varying)
    if (row.value(c) != "-") details += (details.empty() ? "" : ", ") + c + " " + row.value(c);
  return row.value("strategy") + (details.empty() ? "" : " (" + details + ")");
}

double tokens_per_device(const ConfigRow& row) {
  const Stat* t = stat(row, schema::kTokensPerS);
  return t ? t->median / double(row.world_size()) : std::nan("");
}

namespace {

// The tokens/s statistics of a row per device (global / world size).
std::optional<Stat> per_device_tokens(const ConfigRow& r) {
  const Stat* s = stat(r, schema::kTokensPerS);
  if (!s) return std::nullopt;
  Stat d = *s;
  const double n = double(r.world_size());
  d.median /= n;
  d.min /= n;
  d.max /= n;
  d.q1 /= n;
  d.q3 /= n;
  return d;
}

}  // namespace

bool throughput_tie(const ConfigRow& a, const ConfigRow& b) {
  const auto x = per_device_tokens(a), y = per_device_tokens(b);
  return x && y && iqr_overlap(&*x, &*y);
}

bool memory_tie(const ConfigRow& a, const ConfigRow& b) {
  return iqr_overlap(stat(a, schema::kPeakBytes), stat(b, schema::kPeakBytes));
}

std::vector<const ConfigRow*> pareto_front(const std::vector<const ConfigRow*>& rows) {
  std::vector<const ConfigRow*> front;
  for (const ConfigRow* r : rows) {
    const double t = tokens_per_device(*r), m = r->peak_bytes_max;
    if (std::isnan(t) || std::isnan(m)) continue;
    bool dominated = false;
    for (const ConfigRow* o : rows) {
      const double ot = tokens_per_device(*o), om = o->peak_bytes_max;
      if (o == r || std::isnan(ot) || std::isnan(om)) continue;
      dominated = dominated || (ot >= t && om <= m && (ot > t || om < m));
    }
    if (!dominated) front.push_back(r);
  }
  return front;
}

namespace {

// The step as the sum of its phases' medians (step_time_s = Σ phases per step; the medians of
// the phases need not add up to the median step, their sum does add up to its parts).
double attributed_step(const ConfigRow& r) {
  double sum = 0;
  for (const auto& p : kPhases) sum += zero_if_nan(r.median(p.metric));
  return sum;
}

// "forward 41 %, backward 38 %, exposed communication 12 %": the largest shares of its step.
std::string phase_shares(const ConfigRow& r) {
  const double step = attributed_step(r);
  std::vector<std::pair<double, std::string>> shares;
  for (const auto& p : kPhases) shares.push_back({zero_if_nan(r.median(p.metric)) / step, p.name});
  std::sort(shares.rbegin(), shares.rend());
  std::string s;
  for (size_t i = 0; i < shares.size() && i < 3 && shares[i].first >= 0.01; ++i)
    s += (i ? ", " : "") + shares[i].second + " " + fmt("%.0f", 100 * shares[i].first) + " %";
  return s;
}

// How much less `r` delivers per device than `best`, and the phases that make its step longer
// (scaled to best's tokens per step), or that its phases are no longer (fewer tokens per step,
// a rank that waits elsewhere).
std::string slower_because(const ConfigRow& r, const ConfigRow& best, const std::string& best_name) {
  const double scale = tokens_per_step(best) / tokens_per_step(r);
  const double step = attributed_step(r) * scale, best_step = attributed_step(best);
  std::string s = fmt("%.0f", 100 * (1 - tokens_per_device(r) / tokens_per_device(best))) +
                  " % fewer tokens/s per device than " + best_name;
  if (!(step > best_step)) return s + "; its step phases are no longer (" + phase_shares(r) + ")";
  std::vector<std::tuple<double, std::string, double, double>> deltas;  // Δ s, name, share, best share
  for (const auto& p : kPhases) {
    const double mine = zero_if_nan(r.median(p.metric)) * scale, theirs = zero_if_nan(best.median(p.metric));
    deltas.push_back({mine - theirs, p.name, mine / step, theirs / best_step});
  }
  std::sort(deltas.rbegin(), deltas.rend());
  s += ", its step " + fmt("%.1f", 1e3 * (step - best_step)) + " ms longer (+" +
       fmt("%.0f", 100 * (step / best_step - 1)) + " %): ";
  for (size_t i = 0; i < 2 && std::get<0>(deltas[i]) > 0; ++i)
    s += (i ? ", " : "") + std::get<1>(deltas[i]) + " +" + fmt("%.1f", 1e3 * std::get<0>(deltas[i])) +
         " ms (" + fmt("%.0f", 100 * std::get<2>(deltas[i])) + " % of its step vs " +
         fmt("%.0f", 100 * std::get<3>(deltas[i])) + " %)";
  return s;
}

std::string memory_shares(const ConfigRow& r) {
  std::vector<std::pair<double, std::string>> shares;
  for (const auto& p : kMemoryParts)
    shares.push_back({zero_if_nan(r.median(p.metric)) / r.peak_bytes_max, p.name});
  std::sort(shares.rbegin(), shares.rend());
  std::string s;
  for (size_t i = 0; i < shares.size() && shares[i].first >= 0.01; ++i)
    s += (i ? ", " : "") + shares[i].second + " " + fmt("%.0f", 100 * shares[i].first) + " %";
  return s;
}

std::string heavier_because(const ConfigRow& r, const ConfigRow& best, const std::string& best_name) {
  std::vector<std::pair<double, std::string>> deltas;
  for (const auto& p : kMemoryParts)
    deltas.push_back({zero_if_nan(r.median(p.metric)) - zero_if_nan(best.median(p.metric)), p.name});
  std::sort(deltas.rbegin(), deltas.rend());
  std::string s = "peak " + bytes_text(r.peak_bytes_max) + ", +" +
                  bytes_text(r.peak_bytes_max - best.peak_bytes_max) + " (+" +
                  fmt("%.0f", 100 * (r.peak_bytes_max / best.peak_bytes_max - 1)) + " %) over " + best_name;
  for (size_t i = 0; i < 2 && deltas[i].first > 0; ++i)
    s += (i ? ", " : ": ") + deltas[i].second + " +" + bytes_text(deltas[i].first);
  return s;
}

// Pipeline bubble and recomputation, where they apply.
std::string extras(const ConfigRow& r) {
  std::string s;
  const double bubble = std::isnan(r.bubble_fraction_trace) ? r.bubble_fraction : r.bubble_fraction_trace;
  if (r.config_int("pp") > 1 && !std::isnan(bubble))
    s += "; pipeline bubble " + fmt("%.0f", 100 * bubble) + " % (theory " +
         fmt("%.0f", 100 * r.bubble_fraction_theory) + " %)";
  if (r.value("act_ckpt") == "true")
    s += "; recomputes checkpointed activations (backward / forward = " +
         fmt("%.2f", r.median(schema::kBackward) / r.median(schema::kForward)) + ")";
  return s;
}

}  // namespace

std::string reason_line(const ConfigRow& row, const Group& group) {
  const ConfigRow* fastest = fastest_of(group);
  const ConfigRow* leanest = leanest_of(group);
  std::string s;
  if (!fastest || std::isnan(row.median(schema::kStepTime))) s = "no step times";
  else if (fastest == &row) s = "fastest: its step is " + phase_shares(row);
  else if (throughput_tie(row, *fastest))
    s = "as fast as " + competitor_label(*fastest, group) + " within the step-to-step spread; its step is " +
        phase_shares(row);
  else s = slower_because(row, *fastest, competitor_label(*fastest, group));
  s += extras(row) + ". Memory: ";
  if (!leanest || std::isnan(row.peak_bytes_max)) s += "no peak measured";
  else if (leanest == &row) s += "leanest, peak " + bytes_text(row.peak_bytes_max) + " = " + memory_shares(row);
  else s += heavier_because(row, *leanest, competitor_label(*leanest, group));
  return s + ".";
}

namespace {

std::string tps(double v) { return fmt("%.0f", v) + " tok/s per device"; }


// "**ddp** at 1,234 tok/s per device, +12 % over fsdp (1,100)" or a tie between the leaders.
void write_winner(std::ostream& out, const Group& g, const char* what, bool memory) {
  std::vector<const ConfigRow*> sorted;
  for (const ConfigRow* r : g.rows)
    if (!std::isnan(memory ? r->peak_bytes_max : tokens_per_device(*r))) sorted.push_back(r);
  auto value = [memory](const ConfigRow* r) { return memory ? r->peak_bytes_max : tokens_per_device(*r); };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const ConfigRow* a, const ConfigRow* b) {
    return memory ? value(a) < value(b) : value(a) > value(b);
  });
  auto show = [&](const ConfigRow* r) {
    return "**" + competitor_label(*r, g) + "** (" + (memory ? bytes_text(value(r)) : tps(value(r))) + ")";
  };
  out << "- " << what << ": ";
  if (sorted.empty()) { out << "not measured\n"; return; }
  if (sorted.size() == 1) { out << show(sorted[0]) << ", the only one measured\n"; return; }
  std::vector<const ConfigRow*> tied = {sorted[0]};
  for (size_t i = 1; i < sorted.size(); ++i)
    if (memory ? memory_tie(*sorted[0], *sorted[i]) : throughput_tie(*sorted[0], *sorted[i]))
      tied.push_back(sorted[i]);
  if (tied.size() > 1) {
    out << "**tie** between";
    for (size_t i = 0; i < tied.size(); ++i) out << (i ? (i + 1 == tied.size() ? " and " : ", ") : " ") << show(tied[i]);
    out << ": the differences lie within the step-to-step spread (interquartile ranges of the "
        << (memory ? "per-step peaks" : "per-step tokens/s") << " overlap)\n";
    return;
  }
  const double ratio = value(sorted[0]) / value(sorted[1]);
  out << show(sorted[0]) << ", " << (memory ? fmt("%.1f", 100 * (1 - ratio)) + " % less than "
                                            : fmt("%.1f", 100 * (ratio - 1)) + " % more than ")
      << show(sorted[1]) << "\n";
}

void write_front(std::ostream& out, const Group& g) {
  const auto front = pareto_front(g.rows);
  out << "- Pareto front (tokens/s per device against peak memory per device):";
  for (size_t i = 0; i < front.size(); ++i) out << (i ? ", " : " ") << competitor_label(*front[i], g);
  std::string dominated;
  for (const ConfigRow* r : g.rows)
    if (std::find(front.begin(), front.end(), r) == front.end())
      dominated += (dominated.empty() ? "" : ", ") + competitor_label(*r, g);
  out << (dominated.empty() ? "; nothing is dominated" : "; dominated: " + dominated) << "\n";
}

void write_group(std::ostream& out, const Group& g) {
  out << "### " << g.title << "\n\n";
  write_winner(out, g, "Fastest", false);
  write_winner(out, g, "Least memory", true);
  if (g.rows.size() > 1) write_front(out, g);
  out << "- Why, from each configuration's measured breakdown:\n";
  for (const ConfigRow* r : g.rows)
    out << "  - **" << competitor_label(*r, g) << "**: " << reason_line(*r, g) << "\n";
  out << "\n";
}

}  // namespace

void write_findings(std::ostream& out, const std::vector<ConfigRow>& rows,
                    const std::vector<NotMeasured>& not_measured) {
  out << "## Findings\n\n"
      << "Computed from the table below, per group of comparable configurations (same model, "
         "device, precision, base dtype, context length and number of ranks). Throughput is the "
         "median tokens/s per device after warm-up; memory is the peak per device (max over ranks "
         "and steps). Two configurations **tie** when the interquartile ranges of their per-step "
         "values overlap. The Pareto front holds the configurations no other one beats in both "
         "tokens/s per device and peak memory per device.\n\n";
  for (const auto& g : comparable_groups(rows)) write_group(out, g);
  out << "### Not in the comparison\n\n";
  if (not_measured.empty())
    out << "Nothing: every result file found was complete and used.\n\n";
  for (const auto& n : not_measured) out << "- `" << n.name << "`: " << n.why << "\n";
  if (!not_measured.empty()) out << "\n";
}

}  // namespace hlp::analysis
