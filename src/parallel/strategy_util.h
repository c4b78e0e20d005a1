#pragma once
// Pieces every strategy uses: building the LoRA model, timing communication waits, the
// global mean loss, bf16 autocast.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/hybrid_lm.h"
#include "parallel/strategy.h"

namespace hlp::parallel {

// The whole model with LoRA applied (deterministic in (seed, parameter name)).
model::HybridLM build_model(const StrategyOptions& options);

// Waits for `work`, adding the blocked time to times.comm_exposed_s.
void timed_wait(const comm::WorkPtr& work, PhaseTimes& times);

// Mean over data-parallel ranks of each rank's mean loss (collective over dp_comm; nullptr = 1).
double dp_mean(comm::Communicator* dp_comm, double local_mean);

// Sum of squares of the slots' gradients (float64 accumulation).
double local_grad_sq(const std::vector<OptimSlot>& slots);

// bf16 compute with fp32 master weights: CPU autocast for the scope (no-op when off).
class AutocastScope {
 public:
  explicit AutocastScope(bool bf16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_;
  bool previous_enabled_ = false;
};

// Parameters with their names, in named_parameters() order.
std::vector<std::pair<std::string, torch::Tensor>> named_params(const torch::nn::Module& m);

// Every parameter of `m` as a whole HeldTensor (replicas: primary only where `primary`).
std::vector<model::hf::HeldTensor> whole_held_tensors(const torch::nn::Module& m, bool primary);

int64_t numel_of(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                 bool trainable_only);

}  // namespace hlp::parallel
