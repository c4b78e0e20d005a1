#pragma once
// A full replica of the model on every rank: the `single` strategy as is, and the base of `ddp`
// (which only adds how gradients are reduced). Gradient accumulation over micro-batches:
// each micro-batch's mean loss is scaled by 1/M before backward, so the accumulated gradient is
// the gradient of this rank's mean loss.
#include <string>
#include <utility>
#include <vector>

#include "model/hybrid_lm.h"
#include "parallel/strategy.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

class ReplicatedStrategy : public Strategy {
 public:
  explicit ReplicatedStrategy(const StrategyOptions& options);
  // Second phase of construction (virtual allocate_grads): called by make_strategy.
  void init();

  std::string name() const override { return options_.spec().name(); }
  double forward_backward(const std::vector<MicroBatch>& micro_batches, int64_t step,
                          PhaseTimes& times) override;
  double eval_loss(const std::vector<MicroBatch>& micro_batches) override;
  torch::Tensor eval_logits(const std::vector<MicroBatch>& micro_batches) override;
  std::vector<OptimSlot>& optim_slots() override { return slots_; }
  double grad_norm() override;
  void zero_grad() override;
  HeldBytes held_bytes() const override;
  int64_t params_total() const override { return params_total_; }
  int64_t params_trainable() const override { return params_trainable_; }
  std::vector<model::hf::HeldTensor> held_tensors() override;

 protected:
  // Gives every trainable parameter a persistent gradient tensor and fills slots_.
  virtual void allocate_grads();
  // Around each micro-batch's backward (ddp: gradient synchronisation on the last one).
  virtual void before_backward(bool last_micro_batch) {}
  virtual void after_backward(bool last_micro_batch, PhaseTimes& times) {}

  StrategyOptions options_;
  model::HybridLM model_{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> trainable_;  // named_parameters order
  std::vector<OptimSlot> slots_;
  ExpertAxis ep_;  // --ep: this replica holds E / ep of the routed experts
  int64_t params_total_ = 0, params_trainable_ = 0, param_bytes_ = 0, grad_bytes_ = 0;
  int64_t param_elements_ = 0;  // held by this rank (params_total_ less the other ranks' experts)
};

}  // namespace hlp::parallel
