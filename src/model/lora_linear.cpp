#include "model/lora_linear.h"

#include <cmath>

#include "model/half_emulation.h"

namespace hlp::model {

namespace F = torch::nn::functional;

LoRALinearImpl::LoRALinearImpl(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features_(in_features), out_features_(out_features) {
  // Values are overwritten by init_parameter (by name) when the model is built.
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out_features}));
}

torch::Tensor LoRALinearImpl::forward(const torch::Tensor& x) {
  // A weight stored in 16 bits (--base-dtype) is used as stored: the input, and the bias, are
  // cast to its dtype (what autocast does anyway; where autocast is off, in the delta-rule
  // core's float32 region, it keeps the weight from being cast to float32 every step). The
  // CPU's fp16 emulation takes its operands as they are (half_emulation.h).
  torch::Tensor in = x, b = bias;
  const auto stored = weight.scalar_type();
  if (stored != x.scalar_type() && (stored == torch::kBFloat16 || stored == torch::kHalf) &&
      !(half_emulation_enabled() && x.is_cpu())) {
    in = x.to(stored);
    if (b.defined()) b = b.to(stored);
  }
  auto y = model::linear(in, weight, b);  // fp16-emulated under --precision fp16 on CPU
  if (rank_ > 0 && !merged_) {
    auto a = dropout_ > 0 ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training()))
                          : x;
    // [..., in] -> [..., r] -> [..., out]
    y = y + scale_ * model::linear(model::linear(a, lora_A), lora_B);
  }
  return y;
}

void LoRALinearImpl::enable_lora(int64_t rank, double alpha, double dropout) {
  TORCH_CHECK(rank > 0, "enable_lora needs rank > 0");
  TORCH_CHECK(rank_ == 0, "LoRA already enabled on this projection");
  rank_ = rank;
  alpha_ = alpha;
  scale_ = alpha / static_cast<double>(rank);
  dropout_ = dropout;
  const auto stored = weight.scalar_type();  // a 16-bit weight's adapters are float32 masters
  const auto options = weight.options().dtype(
      stored == torch::kBFloat16 || stored == torch::kHalf ? torch::kFloat : stored);
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
  lora_A = register_parameter("lora_A", torch::empty({rank, weight.size(1)}, options).uniform_(-bound, bound));
  lora_B = register_parameter("lora_B", torch::zeros({weight.size(0), rank}, options));
}

void LoRALinearImpl::merge() {
  if (rank_ == 0 || merged_) return;
  torch::NoGradGuard no_grad;
  weight.add_(torch::matmul(lora_B, lora_A), scale_);
  merged_ = true;
}

void LoRALinearImpl::unmerge() {
  if (rank_ == 0 || !merged_) return;
  torch::NoGradGuard no_grad;
  weight.sub_(torch::matmul(lora_B, lora_A), scale_);
  merged_ = false;
}

}  // namespace hlp::model
