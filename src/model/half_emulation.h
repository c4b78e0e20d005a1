#pragma once
// float16 matmuls on a CPU that has none. LibTorch 1.13's CPU backend has no Half GEMM
// ("addmm_impl_cpu_" not implemented for 'Half'), no Half exp / softmax / silu, and its CPU
// autocast accepts only bfloat16. So `--precision fp16` on CPU emulates what CUDA autocast does
// to the matmuls, in float32 tensors holding float16 values:
//   y = half(half(x) @ half(W)^T + half(b))       forward: operands and result rounded to fp16
//   dx = half(half(dy) @ half(W)), dW = half(half(dy)^T half(x))   backward (through the casts)
// Rounding is IEEE binary16, round to nearest even: |v| > 65504 becomes inf, small values go
// subnormal or to zero, exactly as in a CUDA fp16 tensor. The products of two fp16 values are
// exact in fp32 and are accumulated in fp32, as a tensor-core fp16 GEMM accumulates, so the
// emulated result equals a GPU fp16 GEMM up to the order of the fp32 sums.
// Not emulated (stays fp32 on CPU; on CUDA autocast some of these run in fp16): element-wise ops
// between the matmuls (SwiGLU, RoPE, residual adds, gates), the short convolutions, the
// attention and Gated DeltaNet cores. Norms, softmax and the loss are fp32 under autocast too.
//
// The switch is thread-local and set for a forward by parallel::AutocastScope; the backward
// needs no switch (the rounding casts are nodes of the graph).
#include <torch/torch.h>

namespace hlp::model {

// Whether the calling thread's matmuls are emulated in fp16 now.
bool half_emulation_enabled();

// Turns the emulation on (or leaves it as it is when `on` is false) for a scope.
class HalfEmulationGuard {
 public:
  explicit HalfEmulationGuard(bool on);
  ~HalfEmulationGuard();
  HalfEmulationGuard(const HalfEmulationGuard&) = delete;
  HalfEmulationGuard& operator=(const HalfEmulationGuard&) = delete;

 private:
  bool previous_;
};

// v rounded to float16 and back (differentiable: the gradient is rounded the same way).
torch::Tensor round_to_half(const torch::Tensor& v);

// F::linear / torch::matmul, emulated in fp16 when the switch is on and the operands are CPU
// tensors (CUDA tensors are CUDA autocast's); otherwise exactly them.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias = {});
torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace hlp::model
