#pragma once
// Chrome trace / Perfetto JSON export of one result file (docs/formats.md, "Chrome trace /
// Perfetto JSON"):
//   pid = rank, tid = lane (0 compute, 1 comm, 2 data); "X" complete events with ts/dur in µs
//   since the aligned run start; "C" counter events "memory" (current_bytes, peak_bytes at each
//   step end); "M" metadata (process_name, thread_name, sort indices).
// Events on one tid nest perfectly: per lane they are sorted by start, and an event that would
// partly overlap an open one (e.g. a sync op during an async one on the comm lane) moves to an
// overflow tid of the same lane (tid = lane + 3 k, named "comm #2" ...).
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace hlp::metrics {

class ResultReader;

// Which part of a long run to export (a 1000-step, 8-rank run holds ~10^6 events).
struct TraceExportOptions {
  int64_t first_step = 0;  // events and counters of the steps in
  int64_t last_step = std::numeric_limits<int64_t>::max();  // [first_step, last_step], inclusive
  bool include_unstepped = true;  // events outside any step (step = -1)
};

struct TraceExportStats {
  int64_t complete_events = 0;  // "X"
  int64_t counter_events = 0;   // "C"
  int64_t overflow_tids = 0;    // extra tids needed to keep nesting perfect
};

// Builds the JSON document ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}).
nlohmann::json chrome_trace_json(const ResultReader& reader, const TraceExportOptions& options = {},
                                 TraceExportStats* stats = nullptr);

// Reads h5_path, writes json_path. Throws hlp::UserError for an unreadable input or output.
TraceExportStats export_chrome_trace(const std::string& h5_path, const std::string& json_path,
                                     const TraceExportOptions& options = {});

}  // namespace hlp::metrics
