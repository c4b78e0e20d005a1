#pragma once
// One pre-norm residual block:  h = x + mixer(mixer_norm(x));  y = h + mlp(mlp_norm(h)).
// The mixer is a GatedDeltaNet (G) or a CausalSelfAttention (A, S), registered as "mixer".
// Parameter names inside a block: mixer_norm.weight, mixer.<...>, mlp_norm.weight,
// mlp.{gate,up,down}_proj.<...> (a sparse layer, config.is_moe_layer: mlp.<SparseMoe's names>,
// moe.h).
#include <torch/torch.h>

#include "model/attention.h"
#include "model/config.h"
#include "model/gated_deltanet.h"
#include "model/layers.h"
#include "model/moe.h"

namespace hlp::model {

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config, int64_t layer_index);

  // x: [B, T, D] -> [B, T, D]. Checkpointed when activation checkpointing is on, the module is
  // in training mode and grad mode is enabled.
  torch::Tensor forward(torch::Tensor x);
  torch::Tensor forward_uncheckpointed(const torch::Tensor& x);

  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }
  LayerKind kind() const { return kind_; }
  int64_t layer_index() const { return layer_index_; }  // 0-based position in the full pattern

  RMSNorm mixer_norm{nullptr};
  GatedDeltaNet gdn{nullptr};               // set for G blocks
  CausalSelfAttention attention{nullptr};  // set for A and S blocks
  RMSNorm mlp_norm{nullptr};
  SwiGLU mlp{nullptr};     // set for dense layers
  SparseMoe moe{nullptr};  // set for sparse layers (registered as "mlp")
  // the MLP half's inner function: mlp or moe
  torch::Tensor mlp_forward(const torch::Tensor& x) { return moe ? moe->forward(x) : mlp->forward(x); }

 private:
  LayerKind kind_;
  int64_t layer_index_;
  bool activation_checkpointing_;
};
TORCH_MODULE(Block);

}  // namespace hlp::model
