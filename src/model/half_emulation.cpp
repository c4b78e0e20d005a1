#include "model/half_emulation.h"

namespace hlp::model {

namespace {
thread_local bool emulate_half = false;
}  // namespace

bool half_emulation_enabled() { return emulate_half; }

HalfEmulationGuard::HalfEmulationGuard(bool on) : previous_(emulate_half) {
  if (on) emulate_half = true;
}

HalfEmulationGuard::~HalfEmulationGuard() { emulate_half = previous_; }

torch::Tensor round_to_half(const torch::Tensor& v) {
  // Two casts: autograd's backward of each cast casts the incoming gradient, so d/dv is the
  // gradient rounded to fp16, as it is for an fp16 tensor on the GPU.
  return v.to(torch::kHalf).to(v.scalar_type());
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (!emulate_half || !x.is_cpu() || !x.is_floating_point())
    return torch::nn::functional::linear(x, weight, bias);
  // x: [..., in], weight: [out, in] -> [..., out]
  const torch::Tensor b = bias.defined() ? round_to_half(bias) : bias;
  return round_to_half(
      torch::nn::functional::linear(round_to_half(x), round_to_half(weight), b));
}

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!emulate_half || !a.is_cpu() || !a.is_floating_point()) return torch::matmul(a, b);
  return round_to_half(torch::matmul(round_to_half(a), round_to_half(b)));
}

}  // namespace hlp::model
