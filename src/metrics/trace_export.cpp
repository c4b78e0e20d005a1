#include "metrics/trace_export.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "metrics/result_reader.h"
#include "metrics/schema.h"

namespace hlp::metrics {

namespace {

using nlohmann::json;

constexpr double kUsPerS = 1e6;

std::string tid_name(int lane, int k) {
  std::string base = lane_name(static_cast<Lane>(lane));
  return k == 0 ? base : base + " #" + std::to_string(k + 1);
}

// Assigns each event of one lane to a sub-lane k so that events on each sub-lane nest:
// sorted by (start asc, end desc), an event fits on sub-lane k when, after closing the events
// that ended before it starts, it lies inside the innermost still-open one (or nothing is open).
std::vector<int> assign_sublanes(const std::vector<const TraceEvent*>& sorted) {
  std::vector<std::vector<double>> open_ends;  // per sub-lane: stack of end times
  std::vector<int> sublane(sorted.size(), 0);
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TraceEvent& e = *sorted[i];
    size_t k = 0;
    for (;; ++k) {
      if (k == open_ends.size()) open_ends.emplace_back();
      auto& stack = open_ends[k];
      while (!stack.empty() && stack.back() <= e.start_s) stack.pop_back();
      if (stack.empty() || e.end_s <= stack.back()) {
        stack.push_back(e.end_s);
        break;
      }
    }
    sublane[i] = static_cast<int>(k);
  }
  return sublane;
}

}  // namespace

json chrome_trace_json(const ResultReader& reader, const TraceExportOptions& options,
                       TraceExportStats* stats_out) {
  auto wanted = [&](int64_t step) {
    if (step < 0) return options.include_unstepped;
    return step >= options.first_step && step <= options.last_step;
  };
  TraceExportStats stats;
  json events = json::array();
  const int world = reader.world_size();
  const std::vector<std::string> hosts =
      reader.has_attr(schema::kAttrHosts) ? reader.hosts() : std::vector<std::string>{};

  for (int rank = 0; rank < world; ++rank) {
    std::string pname = "rank " + std::to_string(rank);
    if (rank < static_cast<int>(hosts.size()) && !hosts[rank].empty())
      pname += " (" + hosts[rank] + ")";
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"name", pname}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"sort_index", rank}}}});

    const std::vector<TraceEvent> trace = reader.trace(rank);
    for (int lane = 0; lane < kNumLanes; ++lane) {
      std::vector<const TraceEvent*> sorted;
      for (const auto& e : trace)
        if (static_cast<int>(e.lane) == lane && wanted(e.step)) sorted.push_back(&e);
      // Outer events first when two start together (longer first).
      std::stable_sort(sorted.begin(), sorted.end(), [](const TraceEvent* a, const TraceEvent* b) {
        if (a->start_s != b->start_s) return a->start_s < b->start_s;
        return a->end_s > b->end_s;
      });
      const std::vector<int> sublane = assign_sublanes(sorted);
      const int sublanes = sorted.empty() ? 1 : 1 + *std::max_element(sublane.begin(), sublane.end());
      stats.overflow_tids += sublanes - 1;
      for (int k = 0; k < sublanes; ++k) {
        const int tid = lane + kNumLanes * k;
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid},
                          {"args", {{"name", tid_name(lane, k)}}}});
        events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", rank},
                          {"tid", tid}, {"args", {{"sort_index", tid}}}});
      }
      for (size_t i = 0; i < sorted.size(); ++i) {
        const TraceEvent& e = *sorted[i];
        json args = {{"step", e.step}};
        if (e.micro_batch >= 0) args["micro_batch"] = e.micro_batch;
        if (e.bytes != 0) args["bytes"] = e.bytes;
        events.push_back({{"name", e.name},
                          {"cat", e.category},
                          {"ph", "X"},
                          {"ts", e.start_s * kUsPerS},
                          {"dur", std::max(0.0, (e.end_s - e.start_s) * kUsPerS)},
                          {"pid", rank},
                          {"tid", lane + kNumLanes * sublane[i]},
                          {"args", std::move(args)}});
        ++stats.complete_events;
      }
    }
  }

  // Memory counters from the step metrics: one sample per rank and step, at the step's end.
  if (reader.has_step_metric(schema::kStepEnd) && reader.has_step_metric(schema::kCurrentBytes) &&
      reader.has_step_metric(schema::kPeakBytes)) {
    const StepMatrix end = reader.steps(schema::kStepEnd);
    const StepMatrix cur = reader.steps(schema::kCurrentBytes);
    const StepMatrix peak = reader.steps(schema::kPeakBytes);
    const std::vector<int64_t> step_numbers = reader.step_numbers();
    for (int64_t r = 0; r < end.ranks; ++r) {
      for (int64_t i = 0; i < end.steps; ++i) {
        if (i < static_cast<int64_t>(step_numbers.size()) && !wanted(step_numbers[i])) continue;
        const double t = end.at(r, i);
        const double c = cur.at(r, i);
        const double p = peak.at(r, i);
        if (!std::isfinite(t) || !std::isfinite(c) || !std::isfinite(p)) continue;
        events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", t * kUsPerS},
                          {"pid", static_cast<int>(r)}, {"tid", 0},
                          {"args", {{"current_bytes", c}, {"peak_bytes", p}}}});
        ++stats.counter_events;
      }
    }
  }

  json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"source", reader.path()},
                      {"strategy", reader.attr_string(schema::kAttrStrategy)},
                      {"world_size", world},
                      {"complete", reader.complete()},
                      {"hlp_version", reader.attr_string(schema::kAttrHlpVersion)},
                      {"time_origin", "aligned run start (rank 0 clock)"}};
  if (stats_out) *stats_out = stats;
  return doc;
}

TraceExportStats export_chrome_trace(const std::string& h5_path, const std::string& json_path,
                                     const TraceExportOptions& options) {
  if (options.first_step > options.last_step)
    throw user_error("trace export: first step ", options.first_step, " is after last step ",
                     options.last_step);
  ResultReader reader(h5_path);
  TraceExportStats stats;
  const json doc = chrome_trace_json(reader, options, &stats);
  std::ofstream out(json_path);
  if (!out) throw user_error("cannot write trace '", json_path, "': check the directory exists");
  out << doc.dump() << "\n";
  if (!out) throw user_error("writing trace '", json_path, "' failed (disk full?)");
  return stats;
}

}  // namespace hlp::metrics
