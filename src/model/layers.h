#pragma once
// The two per-token layers of every block: RMSNorm and the SwiGLU MLP.
#include <torch/torch.h>

#include "model/config.h"
#include "model/lora_linear.h"

namespace hlp::model {

// y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  // x: [..., dim] -> [..., dim]
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  // [dim], "weight"
  double eps;
  Kernels kernels = Kernels::automatic;  // fused CPU kernel, lean, or op-by-op reference (same math)
};
TORCH_MODULE(RMSNorm);

// down_proj(SiLU(gate_proj x) * up_proj x), no biases. Names: gate_proj, up_proj, down_proj.
class SwiGLUImpl : public torch::nn::Module {
 public:
  SwiGLUImpl(int64_t hidden, int64_t mlp_hidden);
  // x: [B, T, D] -> [B, T, D]   (inner [B, T, mlp_hidden])
  torch::Tensor forward(const torch::Tensor& x);
  LoRALinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Kernels kernels = Kernels::automatic;  // fused / lean SiLU(gate) * up or the op-by-op reference
};
TORCH_MODULE(SwiGLU);

}  // namespace hlp::model
