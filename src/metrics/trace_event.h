#pragma once
// One trace event and the lanes it can live on. Plain data: the recorder produces these,
// the writer stores them in /trace/rank<N>, the reader gives them back, the exporter draws them.
#include <cstdint>
#include <map>
#include <string>

namespace hlp::metrics {

// A lane is a timeline on which events nest perfectly (Perfetto "thread"): compute spans from
// the training loop, communication ops from the communicator, data-loader waits and work.
enum class Lane : int32_t { Compute = 0, Comm = 1, Data = 2 };
inline constexpr int kNumLanes = 3;

inline const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::Compute: return "compute";
    case Lane::Comm: return "comm";
    case Lane::Data: return "data";
  }
  return "unknown";
}

struct TraceEvent {
  std::string name;       // "forward", "all_reduce", "layer3.mixer" ... (48 bytes kept in files)
  std::string category;   // "step", "comm", "data" ... (16 bytes kept in files)
  Lane lane = Lane::Compute;
  double start_s = 0.0;   // seconds since the aligned run start (same origin on every rank)
  double end_s = 0.0;
  int64_t step = -1;      // -1: outside a training step
  int32_t micro_batch = -1;  // -1: not tied to a micro-batch
  int64_t bytes = 0;      // payload bytes (comm ops), 0 otherwise
};

// Metric name (schema.h, e.g. schema::kLoss) -> value for one rank and one step.
using StepMetrics = std::map<std::string, double>;

struct StepRecord {
  int64_t step = 0;
  StepMetrics values;
};

}  // namespace hlp::metrics
