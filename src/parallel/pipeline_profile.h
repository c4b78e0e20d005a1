#pragma once
// `--pp-split profiled`: the balanced split on per-layer costs measured on this machine.
// Each rank times forward + backward of one block of every kind in the pattern (G, A, S) at
// [1, T, D] (LoRA applied, median of 3 after a warm-up), the times are averaged over the world
// (so every rank derives the same split), and each layer's cost becomes its kind's time. The
// embedding and head, which cannot be timed alone, keep their modelled cost converted to
// seconds with the blocks' measured seconds per modelled FLOP.
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace hlp::parallel {

// COLLECTIVE over `world`. Per-layer costs [L+2] in seconds per sequence of T tokens.
std::vector<double> profile_layer_costs(const model::ModelConfig& config,
                                        const model::LoraConfig& lora, int64_t seq_len,
                                        uint64_t seed, comm::Communicator& world,
                                        const c10::Device& device = c10::Device(c10::kCPU));

}  // namespace hlp::parallel
