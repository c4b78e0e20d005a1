#pragma once
// Optional tensor arguments of a torch::autograd::Function (fused_ops.cpp, lean_ops.cpp):
// LibTorch 1.13's Function::apply records device and dtype of every tensor argument, so an
// absent tensor travels as an empty placeholder and is turned back into "undefined" inside.
#include <torch/torch.h>

namespace hlp::model::kernels {

inline torch::Tensor placeholder_if_undefined(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}
inline torch::Tensor undefined_if_placeholder(const torch::Tensor& t) {
  return t.numel() == 0 ? torch::Tensor() : t;
}

}  // namespace hlp::model::kernels
