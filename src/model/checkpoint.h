#pragma once
// Activation checkpointing (LibTorch 1.13 has no torch::utils::checkpoint in C++).
// checkpoint(fn, x) runs fn(x) under NoGradGuard, keeping only x; backward re-runs fn on x with
// grad enabled and back-propagates through the recomputed graph: parameter gradients are
// accumulated into .grad (as PyTorch's reentrant checkpoint does), the input gradient returned.
// The CPU RNG state is restored for the recomputation, so dropout draws the same mask.
#include <torch/torch.h>

#include <functional>

namespace hlp::model {

using BlockFunction = std::function<torch::Tensor(const torch::Tensor&)>;

// `params_require_grad`: whether fn has trainable parameters. If so and x does not require
// grad (e.g. the first block after a frozen embedding), x is made a leaf that does, so that
// the recomputation still runs and the parameters still get their gradients.
torch::Tensor checkpoint(const BlockFunction& fn, const torch::Tensor& x, bool params_require_grad);

}  // namespace hlp::model
