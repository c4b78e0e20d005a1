// `single` (and the replica logic `ddp` builds on): the reference every strategy must match.
#include "common/clock.h"
#include "metrics/recorder.h"
#include "parallel/replicated.h"
#include "model/accounting.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

ReplicatedStrategy::ReplicatedStrategy(const StrategyOptions& options)
    : options_(options), ep_(expert_axis(options)) {
  model_ = build_model(options_);
  for (auto& [name, p] : named_params(*model_)) {
    params_total_ += p.numel();
    param_bytes_ += p.nbytes();
    if (p.requires_grad()) {
      params_trainable_ += p.numel();
      trainable_.emplace_back(name, p);
    }
  }
  param_elements_ = params_total_;
  if (ep_.active()) {  // the whole model's counts, every rank's experts included
    const auto counts = model::count_parameters(options_.model, options_.lora);
    params_total_ = counts.total;
    params_trainable_ = counts.trainable;
  }
}

void ReplicatedStrategy::init() { allocate_grads(); }

void ReplicatedStrategy::allocate_grads() {
  for (auto& [name, p] : trainable_) {
    at::Tensor g = at::zeros_like(p);
    p.mutable_grad() = g;  // backward accumulates into it in place
    slots_.push_back({name, p, g});
    grad_bytes_ += g.nbytes();
  }
}

double ReplicatedStrategy::forward_backward(const std::vector<MicroBatch>& micro_batches,
                                            int64_t step, PhaseTimes& times) {
  metrics::Recorder* rec = options_.recorder;
  const double scale = 1.0 / double(micro_batches.size());
  double loss_sum = 0.0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const bool last = m + 1 == micro_batches.size();
    torch::Tensor loss;
    {
      ComputeTimer timer(times.forward_s);
      auto span = rec ? rec->span("forward", metrics::Lane::Compute, step, int32_t(m))
                      : metrics::Recorder::Span();
      AutocastScope autocast(options_.precision);
      // [B, T] -> scalar mean loss of this micro-batch (logits [B, T, V] only with --loss-impl full)
      loss = model_->forward_loss(micro_batches[m].inputs, micro_batches[m].targets);
    }
    loss_sum += loss.item<double>();
    {
      ComputeTimer timer(times.backward_s);
      auto span = rec ? rec->span("backward", metrics::Lane::Compute, step, int32_t(m))
                      : metrics::Recorder::Span();
      before_backward(last);
      backward_scaled(loss * scale, loss_scale());
      after_backward(last, times);
    }
  }
  return dp_mean(options_.dp_comm.get(), loss_sum * scale);
}

double ReplicatedStrategy::eval_loss(const std::vector<MicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  AutocastScope autocast(options_.precision);
  double sum = 0.0;
  for (const auto& mb : micro_batches)
    sum += model_->forward_loss(mb.inputs, mb.targets).item<double>();
  return dp_mean(options_.dp_comm.get(), sum / double(micro_batches.size()));
}

torch::Tensor ReplicatedStrategy::eval_logits(const std::vector<MicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  AutocastScope autocast(options_.precision);
  std::vector<torch::Tensor> out;
  for (const auto& mb : micro_batches) out.push_back(model_->forward(mb.inputs).to(torch::kFloat));
  return torch::cat(out);
}

double ReplicatedStrategy::grad_norm() { return std::sqrt(grad_sq_with_experts(slots_, ep_)); }

void ReplicatedStrategy::zero_grad() {
  for (auto& s : slots_) s.grad.zero_();
}

HeldBytes ReplicatedStrategy::held_bytes() const {
  return {param_bytes_, grad_bytes_, param_elements_};  // a whole replica (its experts)
}

std::vector<model::hf::HeldTensor> ReplicatedStrategy::held_tensors() {
  return whole_held_tensors(*model_, !options_.dp_comm || options_.dp_comm->rank() == 0, ep_);
}

}  // namespace hlp::parallel
