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
//
// Expert parallelism (config.moe_ep > 1): the layer holds only its rank's routed experts
// (named by their global ids, so a checkpoint's names load as they are) and reaches the others
// through the ExpertShard the strategy made current (ExpertShardScope). The router, the
// weights and the shared expert stay with the tokens; the (token, k) slots, sorted by expert
// (then token), travel to their expert's rank and back (dispatch, combine): the rows each rank
// sends are counted first (exchange_counts), then the rows move (exchange, differentiable: its
// backward is the same exchange the other way). The routed sum is then added in the same order
// as without expert parallelism (expert by expert, increasing id).
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
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

// Expert parallelism as the model sees it; implemented by parallel/expert_parallel.h.
class ExpertShard {
 public:
  virtual ~ExpertShard() = default;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // counts [E] int64: the slots this rank routes to each expert of the layer -> [ranks, E /
  // ranks] int64 (CPU): row s = what rank s routes to each of this rank's experts. Collective.
  virtual torch::Tensor exchange_counts(const torch::Tensor& counts) = 0;
  // rows [n, D], the first send_rows[0] for rank 0, the next send_rows[1] for rank 1, ... ->
  // the rows the ranks send this one, recv_rows[s] from rank s, in rank order. Differentiable.
  // `combine`: the return trip (expert outputs back to their tokens), for the statistics.
  virtual torch::Tensor exchange(const torch::Tensor& rows, const std::vector<int64_t>& send_rows,
                                 const std::vector<int64_t>& recv_rows, bool combine) = 0;
};

// The shard the calling thread's forward runs under (nullptr: every expert is local).
ExpertShard* current_expert_shard();
class ExpertShardScope {
 public:
  explicit ExpertShardScope(ExpertShard* shard);
  ~ExpertShardScope();
  ExpertShardScope(const ExpertShardScope&) = delete;
  ExpertShardScope& operator=(const ExpertShardScope&) = delete;

 private:
  ExpertShard* previous_;
};

// Slots (token, k) each sparse layer routed to each expert, summed over the training forwards
// of a scope (a forward with grad enabled: once per micro-batch, also under activation
// checkpointing, whose first pass runs without grad): layer index -> [E] int64 on the CPU.
// The trainer makes one current per step (RoutingTallyScope) and records it.
struct RoutingTally {
  std::map<int64_t, torch::Tensor> counts;
  void add(int64_t layer, const torch::Tensor& expert_counts);
};
RoutingTally* current_routing_tally();
class RoutingTallyScope {
 public:
  explicit RoutingTallyScope(RoutingTally* tally);
  ~RoutingTallyScope();
  RoutingTallyScope(const RoutingTallyScope&) = delete;
  RoutingTallyScope& operator=(const RoutingTallyScope&) = delete;

 private:
  RoutingTally* previous_;
};

// "blocks.3.mlp.experts.5.up_proj.lora_A": a routed expert's parameter (split by --ep; the
// shared expert's are not).
bool is_routed_expert_param(const std::string& name);

class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& config, int64_t layer_index = 0);

  // x: [B, T, D] -> [B, T, D]
  torch::Tensor forward(const torch::Tensor& x);

  // The records of the forwards since the last call (training with the load-balancing loss).
  std::vector<std::shared_ptr<RouterRecord>> take_router_records();
  // Tests: keep the live router logits (with their graph) instead; take_router_logits.
  void set_record_live_logits(bool on) { live_ = on; }
  std::vector<torch::Tensor> take_router_logits();

  LoRALinear gate{nullptr};
  // this rank's routed experts, first_expert .. first_expert + size - 1, registered under
  // "experts" by their global ids ("0", "1", ... without expert parallelism)
  std::vector<SwiGLU> experts;
  int64_t first_expert = 0, num_experts = 0;  // num_experts: E, every rank's together
  SwiGLU shared_expert{nullptr};               // null when moe_shared_hidden is 0
  LoRALinear shared_expert_gate{nullptr};
  int64_t top_k;
  bool norm_topk;

 private:
  // the routed sum [N, D] of rows [N, D] with weights w and experts idx [N, K]: local experts,
  // or dispatched to and combined from the shard's ranks
  torch::Tensor routed_local(const torch::Tensor& rows, const torch::Tensor& w,
                             const torch::Tensor& idx);
  torch::Tensor routed_sharded(const torch::Tensor& rows, const torch::Tensor& w,
                               const torch::Tensor& idx, ExpertShard& shard);

  int64_t layer_index_ = 0;
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
