// `ddp`: a replica per rank; gradients of trainable parameters are all-reduced (average) in
// buckets that launch from autograd hooks while backward is still running, overlapping
// communication with the rest of backward. Only the last micro-batch of a step synchronises
// (gradient accumulation runs locally before it, like DDP's no_sync()).
//
// Gradients are views into the bucket buffers (DDP's gradient_as_bucket_view), so backward
// accumulates straight into what is all-reduced. Buckets are filled in reverse parameter order
// (the order backward produces gradients) and always launched in bucket order, so every rank
// issues the same collectives in the same order.
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "parallel/ddp.h"
#include "model/moe.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

DdpStrategy::DdpStrategy(const StrategyOptions& options) : ReplicatedStrategy(options) {}

void DdpStrategy::allocate_grads() {
  const int64_t bucket_cap_bytes = std::max<int64_t>(4, int64_t(options_.bucket_mb * 1024 * 1024));
  // Reverse order: the last layers' gradients are ready first.
  std::vector<size_t> order, experts;
  for (size_t i = trainable_.size(); i-- > 0;)
    (ep_.active() && model::is_routed_expert_param(trainable_[i].first) ? experts : order)
        .push_back(i);
  bucket_of_.assign(trainable_.size(), 0);
  std::vector<std::vector<size_t>> members(1);
  int64_t bytes = 0;
  for (size_t idx : order) {
    const int64_t pb = trainable_[idx].second.nbytes();
    if (bytes > 0 && bytes + pb > bucket_cap_bytes) {
      members.emplace_back();
      bytes = 0;
    }
    members.back().push_back(idx);
    bytes += pb;
  }
  slots_.resize(trainable_.size());
  if (!experts.empty()) {
    int64_t numel = 0;
    for (size_t idx : experts) numel += trainable_[idx].second.numel();
    expert_flat_ =
        at::zeros({numel}, trainable_[experts.front()].second.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t idx : experts) {
      auto& [name, p] = trainable_[idx];
      at::Tensor g = expert_flat_.narrow(0, offset, p.numel()).view(p.sizes());
      p.mutable_grad() = g;
      slots_[idx] = OptimSlot{name, p, g};
      offset += p.numel();
    }
    grad_bytes_ += expert_flat_.nbytes();
  }
  for (auto& m : members) {
    if (m.empty()) continue;
    Bucket b;
    int64_t numel = 0;
    for (size_t idx : m) numel += trainable_[idx].second.numel();
    b.flat = at::zeros({numel}, trainable_[m.front()].second.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t idx : m) {
      auto& [name, p] = trainable_[idx];
      at::Tensor g = b.flat.narrow(0, offset, p.numel()).view(p.sizes());
      p.mutable_grad() = g;
      slots_[idx] = OptimSlot{name, p, g};
      bucket_of_[idx] = buckets_.size();
      offset += p.numel();
    }
    b.params = m;
    grad_bytes_ += b.flat.nbytes();
    buckets_.push_back(std::move(b));
  }
  // Hooks on the gradient accumulators (kept alive here; the variable holds a weak pointer).
  for (size_t idx : order) {
    auto acc = torch::autograd::impl::grad_accumulator(trainable_[idx].second);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, idx](const torch::autograd::variable_list& outputs,
                    const torch::autograd::variable_list&) {
          on_grad_ready(idx);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
  }
}

void DdpStrategy::before_backward(bool last_micro_batch) {
  sync_ = last_micro_batch;
  if (!sync_) return;
  for (auto& b : buckets_) {
    b.pending = int64_t(b.params.size());
    b.work.reset();
  }
  next_launch_ = 0;
}

void DdpStrategy::on_grad_ready(size_t param_index) {
  if (!sync_) return;
  Bucket& b = buckets_[bucket_of_[param_index]];
  --b.pending;
  launch_ready_buckets(/*force=*/false);
}

void DdpStrategy::launch_ready_buckets(bool force) {
  while (next_launch_ < buckets_.size() && (force || buckets_[next_launch_].pending <= 0)) {
    Bucket& b = buckets_[next_launch_++];
    b.work = options_.dp_comm->all_reduce_async(b.flat, comm::ReduceOp::Avg);
  }
}

void DdpStrategy::after_backward(bool last_micro_batch, PhaseTimes& times) {
  if (!last_micro_batch) return;
  // Parameters that got no gradient this step (unused) never fire their hook.
  launch_ready_buckets(/*force=*/true);
  for (auto& b : buckets_) wait_for(b.work);
  if (expert_flat_.defined()) reduce_expert_grads(expert_flat_, slots_, ep_);
  sync_ = false;
}

}  // namespace hlp::parallel
