#include "model/block.h"

#include "model/checkpoint.h"

namespace hlp::model {

BlockImpl::BlockImpl(const ModelConfig& c, int64_t layer_index)
    : kind_(c.layer_kind(layer_index)),
      layer_index_(layer_index),
      activation_checkpointing_(c.activation_checkpointing) {
  mixer_norm = register_module("mixer_norm", RMSNorm(c.hidden, c.rms_eps));
  switch (kind_) {
    case LayerKind::gated_delta:
      gdn = register_module("mixer", GatedDeltaNet(c));
      break;
    case LayerKind::full_attention:
      attention = register_module("mixer", CausalSelfAttention(c, /*window=*/0));
      break;
    case LayerKind::sliding_window:
      attention = register_module("mixer", CausalSelfAttention(c, c.window));
      break;
  }
  mlp_norm = register_module("mlp_norm", RMSNorm(c.hidden, c.rms_eps));
  if (c.is_moe_layer(layer_index))
    moe = register_module("mlp", SparseMoe(c, layer_index));
  else
    mlp = register_module("mlp", SwiGLU(c.hidden, c.mlp_hidden));
}

torch::Tensor BlockImpl::forward_uncheckpointed(const torch::Tensor& x) {
  auto normed = mixer_norm->forward(x);
  auto mixed = gdn ? gdn->forward(normed) : attention->forward(normed);
  auto h = x + mixed;
  return h + mlp_forward(mlp_norm->forward(h));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  if (!activation_checkpointing_ || !is_training() || !torch::GradMode::is_enabled())
    return forward_uncheckpointed(x);
  bool params_require_grad = false;
  for (const auto& p : parameters()) params_require_grad = params_require_grad || p.requires_grad();
  return checkpoint([this](const torch::Tensor& in) { return forward_uncheckpointed(in); }, x,
                    params_require_grad);
}

}  // namespace hlp::model
