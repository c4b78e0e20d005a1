#include "model/layers.h"

namespace hlp::model {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto inv_rms = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return x * inv_rms * weight;
}

SwiGLUImpl::SwiGLUImpl(int64_t hidden, int64_t mlp_hidden) {
  gate_proj = register_module("gate_proj", LoRALinear(hidden, mlp_hidden, false));
  up_proj = register_module("up_proj", LoRALinear(hidden, mlp_hidden, false));
  down_proj = register_module("down_proj", LoRALinear(mlp_hidden, hidden, false));
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) {
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

}  // namespace hlp::model
