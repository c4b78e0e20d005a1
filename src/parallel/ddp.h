#pragma once
#include <memory>
#include <vector>

#include "parallel/autograd_node.h"
#include "parallel/replicated.h"

namespace hlp::parallel {

class DdpStrategy : public ReplicatedStrategy {
 public:
  explicit DdpStrategy(const StrategyOptions& options);

  int64_t bucket_count() const { return int64_t(buckets_.size()); }

 protected:
  void allocate_grads() override;
  void before_backward(bool last_micro_batch) override;
  void after_backward(bool last_micro_batch, PhaseTimes& times) override;

 private:
  struct Bucket {
    at::Tensor flat;             // fp32 gradients of `params`, concatenated
    std::vector<size_t> params;  // indices into trainable_
    int64_t pending = 0;         // gradients still to arrive this backward
    comm::WorkPtr work;
  };
  void on_grad_ready(size_t param_index);
  void launch_ready_buckets(bool force);

  std::vector<Bucket> buckets_;
  // --ep: the routed experts' gradients (not in a bucket), averaged over their replicas at the
  // end of the backward (finish_expert_grads)
  at::Tensor expert_flat_;
  std::vector<size_t> bucket_of_;
  std::vector<NodePtr> accumulators_;
  bool sync_ = false;
  size_t next_launch_ = 0;
};

}  // namespace hlp::parallel
