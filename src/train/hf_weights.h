#pragma once
// Hugging Face checkpoints and PEFT adapters for any strategy, through Strategy::held_tensors:
//   --init-from PATH    every rank reads only the regions it holds (its stage's layers, FSDP2
//                       rows, TP slices) straight from the mapped safetensors files into its
//                       tensors, converting BF16 / F16 / F32 to the parameter dtype.
//   --load-adapter DIR  the same for the lora_A / lora_B factors of a PEFT adapter.
//   --save-adapter DIR  the primary pieces of every factor are summed over the world into whole
//                       tensors (an all-reduce of the small adapter set) and rank 0 writes PEFT.
#include <map>
#include <string>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/hf/checkpoint.h"
#include "model/lora_config.h"
#include "parallel/strategy.h"

namespace hlp::train {

struct WeightLoadReport {
  int64_t tensors = 0;         // tensors (some or all of each) filled on this rank
  int64_t tensors_left_out = 0;  // the checkpoint's tensors HLP does not hold (lm_head.weight
                                 // of a tied model, a vision tower)
  int64_t bytes_written = 0;   // bytes of this rank's tensors filled
  int64_t bytes_held = 0;      // bytes of everything this rank holds (base + adapters)
  double seconds = 0.0;        // header checks + reading + conversion
  int64_t peak_before = 0;       // CPU allocator peak before loading: start-up + building the strategy
  int64_t allocated_before = 0;  // CPU allocator counter before loading (bytes)
  int64_t peak_during = 0;       // its peak while loading (bytes)
};

// Base weights from a HF checkpoint (collective only in that every rank checks the same headers).
WeightLoadReport init_from_checkpoint(const std::string& path, const model::ModelConfig& config,
                                      parallel::Strategy& strategy);

// lora_A / lora_B from DIR/adapter_model.safetensors (PEFT names).
WeightLoadReport load_adapter(const std::string& dir, const model::ModelConfig& config,
                              const model::LoraConfig& lora, parallel::Strategy& strategy);

// Whole tensors of `which` by HLP name, on every rank: each element from its one primary
// holder, summed over `world` (collective). For the adapters, and for tests of any part.
std::map<std::string, torch::Tensor> gather_whole(const std::vector<model::hf::ExpectedTensor>& which,
                                                  parallel::Strategy& strategy,
                                                  comm::Communicator& world);

// Whole adapter tensors by HLP name, on every rank (collective over `world`).
std::map<std::string, torch::Tensor> gather_adapter(const model::ModelConfig& config,
                                                    const model::LoraConfig& lora,
                                                    parallel::Strategy& strategy,
                                                    comm::Communicator& world);

// Collective: gathers, then rank 0 writes DIR (PEFT format).
void save_adapter(const std::string& dir, const model::ModelConfig& config,
                  const model::LoraConfig& lora, const std::string& base_model_name_or_path,
                  parallel::Strategy& strategy, comm::Communicator& world);

// Collective: every base tensor is gathered one at a time onto rank 0, merged with its adapter
// (W += alpha / r * B A) and written as DIR/model.safetensors with Hugging Face names; the
// config.json at `config_json` (if any) is copied beside it, so DIR works as --init-from.
// Rank 0 holds the whole model while writing; the others one tensor at a time.
void save_merged(const std::string& dir, const model::ModelConfig& config,
                 const model::LoraConfig& lora, const std::string& config_json,
                 parallel::Strategy& strategy, comm::Communicator& world);

}  // namespace hlp::train
