#pragma once
// Pipeline stage split: which blocks each of the p stages holds (--pp-split).
//
// Layer index convention (model/accounting.h): 0 = embedding, 1..L = blocks 0..L-1, L+1 = head.
// Stage s holds blocks [first_block[s], first_block[s+1]); stage 0 also holds the embedding and
// stage p-1 the final norm + head, so their costs count on those stages.
//
//   uniform   equal block counts (torchtitan / Megatron); the first L % p stages get one more.
//   params    minimises the largest stage's parameter count, DeepSpeed's `parameters` method,
//             which counts trainable parameters only (LoRA: adapters + modules_to_save).
//   balanced  HLP's dynamic split: minimises the largest stage's modelled cost
//             (model::layer_costs: executed training FLOP per token, LoRA- and
//             checkpointing-aware, embedding and head included).
//   profiled  balanced, on per-layer costs refined by a short measured profile on this machine
//             (pipeline_profile.h: one forward+backward of each layer kind; collective).
//   "0,3,7"   explicit first block of every stage (p entries, the first 0, strictly increasing).
// params and balanced are exact min-max partitions (dynamic programming over contiguous
// splits); ties keep the earliest boundaries.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora_config.h"

namespace hlp::parallel {

struct StageSplit {
  std::string method;                 // as given: uniform | params | balanced | explicit list
  std::vector<int64_t> first_block;   // [p]: first block (0-based) of each stage
  std::vector<int64_t> end_block;     // [p]: one past the last block of each stage
  std::vector<double> stage_cost;     // [p]: modelled cost (layer_costs units) of each stage
  double max_over_mean_cost() const;  // max_over_mean(stage_cost)
};

// Largest value over the mean (1.0 = perfectly balanced; 1.0 for empty or all-zero input).
double max_over_mean(const std::vector<double>& values);

// Sums per-layer weights [L+2] (layer index convention) over each stage of `first_block`.
std::vector<double> stage_sums(const std::vector<double>& layer_weights,
                               const std::vector<int64_t>& first_block);

// Contiguous split of L blocks into p non-empty stages minimising the largest stage sum of
// `layer_weights` [L+2] (embedding charged to stage 0, head to stage p-1). Returns first_block.
std::vector<int64_t> min_max_split(const std::vector<double>& layer_weights, int p);

// Resolves --pp-split for p stages. Throws hlp::UserError for an unknown method, more stages
// than blocks, or an explicit list that is malformed or leaves a stage empty.
StageSplit split_stages(const model::ModelConfig& config, const model::LoraConfig& lora,
                        int64_t seq_len, int p, const std::string& method);

// The min-max split of `layer_costs` [L+2] into p stages, labelled `method` (e.g. "profiled");
// stage_cost is reported in the same units.
StageSplit split_on_costs(const std::vector<double>& layer_costs, int p, const std::string& method);

}  // namespace hlp::parallel
