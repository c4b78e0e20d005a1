#pragma once
// Reads one HLP result file (serial HDF5, default file access: no MPI needed) for the analysis
// tool and the tests. Opening validates the file: a missing, foreign, truncated or corrupt file
// throws hlp::UserError with a one-line message naming the path.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metrics/result_info.h"

namespace hlp::metrics {

// A [world_size, steps] matrix of one metric, row-major; NaN where a rank reported nothing.
struct StepMatrix {
  int64_t ranks = 0;
  int64_t steps = 0;
  std::vector<double> values;
  double at(int64_t rank, int64_t step) const {
    return values[static_cast<size_t>(rank * steps + step)];
  }
};

class ResultReader {
 public:
  explicit ResultReader(const std::string& path);
  ~ResultReader();
  ResultReader(const ResultReader&) = delete;
  ResultReader& operator=(const ResultReader&) = delete;

  const std::string& path() const;
  int64_t schema_version() const;
  bool complete() const;
  int world_size() const;

  // Root attributes by name (schema::kAttr*); UserError when missing or of another type.
  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<double> attr_doubles(const std::string& name) const;

  // The RunInfo the writer was given (clock: rank 0's entry) plus what the writer added.
  RunInfo run_info() const;
  std::vector<double> clock_offsets_s() const;  // [world]
  std::vector<std::string> hosts() const;       // [world]: host of each rank

  // /steps
  std::vector<std::string> step_metrics() const;  // dataset names, "step" excluded, sorted
  bool has_step_metric(const std::string& metric) const;
  int64_t num_steps() const;
  std::vector<int64_t> step_numbers() const;      // [steps]
  StepMatrix steps(const std::string& metric) const;

  // /trace/rank<N> (in the order they were recorded)
  std::vector<TraceEvent> trace(int rank) const;

  // /model (nullopt before write_model ran) and /pipeline (pipeline runs only)
  std::optional<ModelInfo> model() const;
  std::optional<PipelineInfo> pipeline() const;
  // /context_parallel (runs with --cp > 1 only)
  std::optional<ContextParallelInfo> context_parallel() const;
  // /experts (models with sparse MoE layers only)
  std::optional<ExpertsInfo> experts() const;
  // /summary (written by finish(): nullopt for a killed run)
  std::optional<Summary> summary() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hlp::metrics
