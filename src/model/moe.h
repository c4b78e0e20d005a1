#pragma once
// Sparse mixture-of-experts MLP as transformers' Qwen3-Next computes it (Qwen3NextSparseMoeBlock,
// docs/hf-checkpoints.md "Qwen3-Next mixture of experts"). For the N = B T tokens x [N, D]:
//   logits = gate x                          [N, E]  (router, no bias)
//   p = softmax(logits) in float32; w, idx = top-K of p (descending); w /= sum w when
//   norm_topk_prob; w cast back to the model dtype
//   routed_t = sum_k w_tk * expert_{idx_tk}(x_t)       expert e: SwiGLU of width moe_hidden
//   out_t = routed_t + sigmoid(shared_expert_gate x_t) * shared_expert(x_t)
// The routed sum is taken expert by expert in increasing expert id (transformers' eager path;
// its grouped_mm path adds a token's K terms in top-k order: the same up to rounding). Dropless:
// every token reaches its K experts; only experts with tokens run.
// Parameter names (the Hub's per-expert layout): gate.weight [E, D],
// experts.<e>.{gate,up}_proj.weight [I, D], experts.<e>.down_proj.weight [D, I],
// shared_expert.{gate,up,down}_proj.weight, shared_expert_gate.weight [1, D]; all LoRALinear.
//
// The load-balancing loss (load_balancing_loss) pools the router logits of every sparse layer
// of the forward: with R pooled rows, n_e the (row, k) slots that chose expert e and Pbar_e the
// mean softmax probability of e over the rows,   aux = E sum_e (n_e / R) Pbar_e
// (not divided by K; n_e carries no gradient). With config.moe_aux_loss, in training mode, a
// layer keeps its logits (detached, [N, E]) in a RouterRecord and passes its output through an
// identity whose backward also hands the router logits the record's gradient. HybridLM::loss
// takes the records (take_router_records), adds moe_aux_coef x aux as a value, and fills each
// record's gradient, d(coef aux)/d logits = coef (E / R) p (F - p.F) row by row (p the row's
// softmax, F_e = n_e / R): so the load-balancing gradient flows inside each block's own backward,
// where fsdp / fsdp2 have its router weight gathered (a second output of the block, taken by the
// loss directly, would reach the router's backward after its weight was released).
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/layers.h"
#include "model/lora_linear.h"

namespace hlp::model {

// One sparse layer's router logits of one forward, and (once the loss is known) their gradient.
struct RouterRecord {
  torch::Tensor logits;  // [N, E], detached
  torch::Tensor grad;    // [N, E], zeros until HybridLM::loss fills it (in place)
};

class SparseMoeImpl : public torch::nn::Module {
 public:
  explicit SparseMoeImpl(const ModelConfig& config);

  // x: [B, T, D] -> [B, T, D]
  torch::Tensor forward(const torch::Tensor& x);

  // The records of the forwards since the last call (training with the load-balancing loss).
  std::vector<std::shared_ptr<RouterRecord>> take_router_records();
  // Tests: keep the live router logits (with their graph) instead; take_router_logits.
  void set_record_live_logits(bool on) { live_ = on; }
  std::vector<torch::Tensor> take_router_logits();

  LoRALinear gate{nullptr};
  std::vector<SwiGLU> experts;  // registered under "experts" as "0", "1", ...
  SwiGLU shared_expert{nullptr};               // null when moe_shared_hidden is 0
  LoRALinear shared_expert_gate{nullptr};
  int64_t top_k;
  bool norm_topk;

 private:
  bool record_ = false, live_ = false;
  std::vector<std::shared_ptr<RouterRecord>> records_;
  std::vector<torch::Tensor> live_logits_;
};
TORCH_MODULE(SparseMoe);

// The load-balancing loss over the router logits of the sparse layers ([N, E] each, pooled).
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t top_k);
// ce + coef x the load-balancing loss of `records`, whose backward scales each record's gradient
// (below) by the loss's own incoming gradient (micro-batch weights, loss scaling) in place.
torch::Tensor add_load_balancing_loss(const torch::Tensor& ce,
                                      const std::vector<std::shared_ptr<RouterRecord>>& records,
                                      int64_t top_k, double coef);
// Its value (no gradient), and each record's gradient of coef x it for a unit loss.
torch::Tensor load_balancing_loss_into(const std::vector<std::shared_ptr<RouterRecord>>& records,
                                       int64_t top_k, double coef);

}  // namespace hlp::model
