#pragma once
// Finding result files and loading each one into a RunData: the configuration that identifies
// it (root attributes + the resolved INI in `config`) and its per-step metrics reduced over
// ranks. A file that cannot be used (truncated, corrupt, foreign, incomplete) becomes a Skip
// with a one-line reason instead of an error: one bad job must not spoil a sweep's report.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/trace_bubble.h"

namespace hlp::analysis {

// The columns that identify a configuration, in table order. Runs with equal values in all of
// them are reruns of one configuration and are combined. Seed, step count, output path, data
// path and checkpointing do NOT identify a configuration.
inline const std::vector<std::string>& config_columns() {
  static const std::vector<std::string> cols = {
      "strategy", "dp", "pp", "tp", "cp", "ep", "world_size", "device", "model", "pattern",
      "lora_rank", "seq_len", "micro_batch", "global_batch", "micro_batches", "pp_split",
      "pp_schedule", "pp_virtual", "cp_layout", "cp_scheme", "cp_attention",
      "precision", "base_dtype", "act_ckpt", "gdn_mode", "attn_impl"};
  return cols;
}

// The planner's peak per rank of each step: parameters + gradients + optimizer state held +
// the activation peak hlp-train predicted before the first step (hlp-plan composes it alike),
// max over ranks. Derived at load time; absent where the prediction is.
inline constexpr const char* kPredictedPeak = "predicted_peak_bytes";

// Routing of a model with sparse MoE layers (/experts): the (token, k) slots each sparse layer
// routed to each expert, over every rank's tokens, summed over steps (a ConfigRow: also over its
// runs). Empty for dense models.
struct ExpertLoad {
  int64_t experts = 0;          // E
  std::vector<int64_t> layers;  // the sparse layers' indices in the model, in model order [L]
  std::vector<int64_t> tokens;  // [L x E]
  bool empty() const { return layers.empty(); }
  // Sparse layer l (0..L-1): slots of its busiest expert / mean over its experts (1 = even);
  // NaN when it routed nothing.
  double imbalance(size_t l) const;
};

struct RunData {
  std::string path;
  bool complete = false;
  // The ranks of some node asked for more compute threads than it has cores (root attribute
  // oversubscribed): its times are inflated and noisy.
  bool oversubscribed = false;
  std::map<std::string, std::string> config;  // config_columns() -> value ("-" if n/a, "?" unknown)
  // metric -> [steps] in file order, each value reduced over ranks (see reduce_over_ranks()).
  std::map<std::string, std::vector<double>> per_step;
  std::vector<int64_t> step_numbers;              // [steps]
  std::optional<double> bubble_fraction;          // /pipeline, measured
  std::optional<double> bubble_fraction_theory;   // /pipeline, the schedule's closed form
  std::optional<double> bubble_fraction_simulated;  // /pipeline, ideal clock at measured costs
  // hlp-plan's time model for the run, written by hlp-train into /model (NaN: not predicted);
  // its predicted peak is per_step["predicted_peak_bytes"] (see kPredictedPeak).
  double plan_tokens_per_s = std::numeric_limits<double>::quiet_NaN();
  // Pipeline runs: the bubble per step measured from /trace (trace_bubble.h); empty vectors
  // for other runs, zero counts when the run was not traced.
  TraceBubble trace_bubble;
  // Models with sparse MoE layers: /experts' slots per layer and expert over the file's table.
  ExpertLoad expert_load;
  // Identifies the job that wrote the file (start time, Slurm ids, hosts, config): two files
  // with the same id are copies of one run, not reruns.
  std::string job_id;
  // end_time − start_time of the job (seconds); NaN when the file has no end time (not finished)
  double wall_s = std::numeric_limits<double>::quiet_NaN();

  std::string key() const;  // the config values joined: equal keys = one configuration
  int64_t config_int(const std::string& column) const;  // -1 when not a number
};

struct Skip {
  std::string path;
  std::string reason;  // one line
};

struct LoadResult {
  std::vector<RunData> runs;
  std::vector<Skip> skipped;
};

// Every *.h5 under each directory (recursively, sorted) and every file given directly.
// A path that does not exist is a UserError (a typo, not a bad job).
std::vector<std::string> find_result_files(const std::vector<std::string>& inputs);

// Loads each file; incomplete runs (complete = 0) are skipped unless include_incomplete;
// copies of a file already loaded (same job_id) are skipped, so a run counts once.
LoadResult load_runs(const std::vector<std::string>& files, bool include_incomplete);

// The parsed `key = value` lines of an INI text ("[section]" headers are dropped, so
// "[run] steps = 3" gives "steps"; '#' and ';' start comments).
std::map<std::string, std::string> parse_ini(const std::string& text);

// How one step's values over ranks become one value (NaN ignored; NaN if all are NaN):
//   max  — times and bytes: the slowest / fullest rank defines the step
//   min  — tokens_per_s*, mfu*: each rank divides the global work by its own step time, so the
//          minimum is global work / slowest rank's time
//   mean — loss and the rest
enum class RankReduction { Max, Min, Mean };
RankReduction reduction_for(const std::string& metric);

// The step metrics the analysis reads (others are ignored).
const std::vector<std::string>& analysed_metrics();

}  // namespace hlp::analysis
