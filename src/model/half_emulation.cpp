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

namespace {
// An operand rounded to fp16 in the dtype of `like`: a tensor stored in fp16 (--base-dtype fp16)
// is exactly representable in float32 and is only widened (the CPU has no fp16 GEMM to take it
// as it is); others are rounded.
torch::Tensor half_operand(const torch::Tensor& v, const torch::Tensor& like) {
  return v.scalar_type() == torch::kHalf ? v.to(like.scalar_type()) : round_to_half(v);
}
}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (!emulate_half || !x.is_cpu() || !x.is_floating_point())
    return torch::nn::functional::linear(x, weight, bias);
  // x: [..., in], weight: [out, in] -> [..., out]
  const torch::Tensor b = bias.defined() ? half_operand(bias, x) : bias;
  return round_to_half(
      torch::nn::functional::linear(round_to_half(x), half_operand(weight, x), b));
}

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!emulate_half || !a.is_cpu() || !a.is_floating_point()) return torch::matmul(a, b);
  return round_to_half(torch::matmul(round_to_half(a), half_operand(b, a)));
}

}  // namespace hlp::model
