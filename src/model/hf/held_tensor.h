#pragma once
// HeldTensor: what one rank holds of one named parameter — the whole tensor (single, ddp), a
// pipeline stage's layers, FSDP2 rows, a TP slice, or a TP slice's FSDP2 rows. Strategies
// describe their holdings with it (Strategy::held_tensors); the loader fills exactly these
// regions from a checkpoint, and the adapter writer gathers them back into whole tensors.
#include <torch/torch.h>

#include <string>

#include "model/hf/safetensors.h"

namespace hlp::model::hf {

struct HeldTensor {
  std::string name;      // HLP parameter name of the whole tensor, e.g. "blocks.3.mixer.q_proj.weight"
  torch::Tensor local;   // contiguous, shaped like region.size; writes go to what the rank holds
  std::vector<int64_t> full_shape;  // shape of the whole tensor
  Region region;         // which part of the whole tensor `local` is
  // True for exactly one holder of every element across all ranks (replicas: dp rank 0, tp
  // rank 0 ...), so that a sum over ranks of the primaries' pieces rebuilds the whole tensor.
  bool primary = true;
};

}  // namespace hlp::model::hf
