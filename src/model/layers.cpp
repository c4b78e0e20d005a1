#include "model/layers.h"

#include "model/kernels/fused_ops.h"
#include "model/kernels/lean_ops.h"

namespace hlp::model {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const Kernels k = resolve_kernels(kernels, x.is_cuda());
  if (fused::applicable(k, {x, weight})) return fused::rms_norm(x, weight, eps);
  if (lean::applicable(k)) return lean::rms_norm(x, weight, eps);
  auto inv_rms = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return x * inv_rms * weight;
}

SwiGLUImpl::SwiGLUImpl(int64_t hidden, int64_t mlp_hidden) {
  gate_proj = register_module("gate_proj", LoRALinear(hidden, mlp_hidden, false));
  up_proj = register_module("up_proj", LoRALinear(hidden, mlp_hidden, false));
  down_proj = register_module("down_proj", LoRALinear(mlp_hidden, hidden, false));
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) {
  auto gate = gate_proj->forward(x), up = up_proj->forward(x);  // [B, T, mlp_hidden]
  const Kernels k = resolve_kernels(kernels, x.is_cuda());
  if (fused::applicable(k, {gate, up})) return down_proj->forward(fused::swiglu(gate, up));
  if (lean::applicable(k)) return down_proj->forward(lean::swiglu(gate, up));
  return down_proj->forward(torch::silu(gate) * up);
}

}  // namespace hlp::model
