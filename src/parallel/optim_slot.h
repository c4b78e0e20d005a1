#pragma once
// What the optimizer updates on this rank: a whole trainable parameter (single, ddp) or this
// rank's shard of one (fsdp, fsdp2). `param` and `grad` have equal shapes; both stay the same
// tensors for the whole run (the optimizer keeps per-slot state).
#include <ATen/core/Tensor.h>

#include <string>

namespace hlp::parallel {

struct OptimSlot {
  std::string name;  // parameter name, plus "[shard]" for shards
  at::Tensor param;  // fp32 master values, updated in place
  at::Tensor grad;   // gradient of the global mean loss (after strategy reduction)
};

}  // namespace hlp::parallel
