#pragma once
// `fsdp` (flat-parameter, FSDP1 / ZeRO-3) and `fsdp2` (per-parameter sharding): the model is cut
// into units — the root (embedding, final norm, head) and one unit per block — each sharded over
// the data-parallel group by a ShardedUnit. A block unit is all-gathered before its forward and
// again before its backward, and freed after each; its gradients are reduce-scattered as soon
// as its backward finished (overlapping the backward of the blocks before it). fsdp2 prefetches
// the next unit's all-gather while the current one computes, in forward and backward; fsdp
// prefetches in backward only (FSDP1's default BACKWARD_PRE).
// Construction: the model is built with deferred values (hybrid_lm.h) and each unit gives one
// parameter at a time its values and keeps its shard of it, so a rank holds its shards plus one
// whole parameter (fsdp2) or one whole unit (fsdp) while it builds, never the whole model.
#include <memory>
#include <vector>

#include "model/hybrid_lm.h"
#include "parallel/sharded_unit.h"
#include "parallel/strategy.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

class ShardedStrategy : public Strategy {
 public:
  ShardedStrategy(const StrategyOptions& options, bool per_parameter);

  std::string name() const override { return options_.spec().name(); }
  double forward_backward(const std::vector<MicroBatch>& micro_batches, int64_t step,
                          PhaseTimes& times) override;
  double eval_loss(const std::vector<MicroBatch>& micro_batches) override;
  torch::Tensor eval_logits(const std::vector<MicroBatch>& micro_batches) override;
  std::vector<OptimSlot>& optim_slots() override { return slots_; }
  double grad_norm() override;
  void zero_grad() override;
  HeldBytes held_bytes() const override;
  WorkingSet working_set() const override { return working_set_; }
  int64_t params_total() const override { return params_total_; }
  int64_t params_trainable() const override { return params_trainable_; }
  std::vector<model::hf::HeldTensor> held_tensors() override;

  // Used by the autograd function that wraps each block (fsdp.cpp).
  torch::Tensor block_forward(int64_t block, const torch::Tensor& x_in);
  void block_backward_begin(int64_t block);
  void block_backward_end(int64_t block);

 private:
  ShardedUnit& unit_of_block(int64_t block) { return *units_[size_t(block) + 1]; }
  ShardedUnit& root() { return *units_[0]; }
  torch::Tensor forward_micro_batch(const MicroBatch& mb);

  StrategyOptions options_;
  model::HybridLM model_{nullptr};
  std::vector<std::unique_ptr<ShardedUnit>> units_;  // [root, block 0, ..., block L-1]
  ExpertAxis ep_;  // --ep: the routed experts E / ep a rank, sharded over their replicas
  std::vector<OptimSlot> slots_;
  torch::Tensor anchor_;  // requires grad, so every block's backward runs (frozen embeddings)
  bool prefetch_forward_ = false;
  int64_t pending_block_ = -1;  // block whose reduce-scatter is in flight
  int64_t params_total_ = 0, params_trainable_ = 0;
  WorkingSet working_set_;  // sharded_working_set() of the units
};

}  // namespace hlp::parallel
