#pragma once
// The report's figures: each one chooses its rows from the configuration table, writes
// OUTDIR/<name>.dat and OUTDIR/<name>.gp, or says why it has nothing to show.
//
//   scaling               throughput vs ranks per strategy + ideal linear scaling
//   context_throughput    tokens/s vs sequence length per strategy
//   context_memory        peak MiB vs sequence length per strategy
//   context_activation    measured / predicted activation bytes vs sequence length
//   memory_breakdown      parameters / gradients / optimizer / activations per strategy (stacked)
//   step_time_breakdown   data wait / forward / backward / optimizer / exposed comm / other
//   pipeline_bubble       trace-measured bubble vs micro-batches + (p-1)/(m+p-1)
//   split_ablation        tokens/s per pipeline split (uniform / params / balanced ...)
//   loss_curves           loss per step of every configuration, overlaid
//   plan_accuracy         hlp-plan's predicted / measured peak and tokens/s per configuration
//   expert_load           busiest expert / mean expert per sparse MoE layer, per configuration
//   cp_schemes_cp<N>      one per cp size N: step time and exposed comm vs sequence length per
//                         pair of cp schemes (state / attention); `cp_schemes`, skipped, without cp
//   pareto_t<T>           tokens/s per device vs peak per device at context T, fronts drawn
#include <string>
#include <vector>

#include "analysis/aggregate.h"

namespace hlp::analysis {

struct Figure {
  std::string name;      // file stem: <name>.png, <name>.svg, <name>.gp, <name>.dat
  std::string title;
  std::string sentence;  // what it shows (index.md)
  bool has_data = false;
  std::string skip_reason;  // when !has_data
};

// Writes the data and script of every figure that has data; never renders.
std::vector<Figure> write_figures(const std::vector<ConfigRow>& rows, const std::string& outdir);
// One Pareto figure per context length (figure_pareto.cpp); write_figures puts them first.
std::vector<Figure> pareto_figures(const std::vector<ConfigRow>& rows, const std::string& outdir);

}  // namespace hlp::analysis
