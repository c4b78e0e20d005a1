#include "train/adamw.h"

#include <cmath>

#include "common/error.h"

namespace hlp::train {

AdamW::AdamW(std::vector<OptimSlot> slots, AdamWOptions options)
    : slots_(std::move(slots)), options_(options) {
  for (const auto& s : slots_) {
    TORCH_CHECK(s.param.sizes() == s.grad.sizes(), "AdamW slot ", s.name,
                ": param and grad shapes differ");
    // fp32 state whatever the compute precision (master weights are fp32)
    exp_avg_.push_back(at::zeros_like(s.param, s.param.options().dtype(at::kFloat)));
    exp_avg_sq_.push_back(at::zeros_like(s.param, s.param.options().dtype(at::kFloat)));
  }
}

void AdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_count_));
  const double bias2 = 1.0 - std::pow(b2, double(step_count_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  for (size_t i = 0; i < slots_.size(); ++i) {
    at::Tensor p = slots_[i].param;
    at::Tensor g = slots_[i].grad;
    if (p.numel() == 0) continue;
    if (grad_scale != 1.0) g = g * grad_scale;
    if (options_.weight_decay != 0.0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(b1).add_(g, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  return bytes;
}

std::vector<at::Tensor> AdamW::state_tensors() const {
  std::vector<at::Tensor> out(exp_avg_);
  out.insert(out.end(), exp_avg_sq_.begin(), exp_avg_sq_.end());
  return out;
}

void AdamW::load_state(const std::vector<at::Tensor>& tensors, int64_t step_count) {
  if (tensors.size() != 2 * slots_.size())
    throw user_error("checkpoint optimizer state has ", tensors.size(), " tensors, expected ",
                     2 * slots_.size(), " (was it written by another strategy or world size?)");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < slots_.size(); ++i) {
    exp_avg_[i].copy_(tensors[i]);
    exp_avg_sq_[i].copy_(tensors[slots_.size() + i]);
  }
  step_count_ = step_count;
}

}  // namespace hlp::train
