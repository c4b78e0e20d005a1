#pragma once
// Parameter and FLOP accounting from the config alone (nothing allocated), so that
// jet-nemotron-4b can be counted on a laptop and the pipeline balancer can plan stages.
//
// Layer index convention (same as HybridLM and the pipeline balancer):
//   0 = embedding, 1..L = blocks 0..L-1, L+1 = head (final norm + LM head).
// With tied embeddings, the shared matrix is counted once, in layer 0, as parameters; its
// matmul FLOPs are charged to the head, where the matmul happens.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora_config.h"
#include "model/precision.h"

namespace hlp::model {

// One parameter of the model exactly as HybridLM names it (named_parameters()).
struct ParamSpec {
  std::string name;            // e.g. "blocks.3.mixer.q_proj.weight"
  std::string module;          // e.g. "blocks.3.mixer.q_proj"
  std::vector<int64_t> shape;  // e.g. {out, in}
  int64_t numel = 0;
  int64_t layer = 0;           // layer index convention above
  bool trainable = false;
  bool adapter = false;        // lora_A / lora_B
  // Share of the tokens whose forward reads it: 1, or K / E for a routed expert's (moe.h)
  double active = 1.0;
};

// One projection (a LoRALinear in the model).
struct LinearSpec {
  std::string module;  // "blocks.3.mixer.q_proj"
  int64_t in = 0, out = 0;
  bool bias = false;
  int64_t layer = 0;
  double active = 1.0;  // share of the tokens it projects (a routed expert: K / E)
};

std::vector<LinearSpec> linear_table(const ModelConfig& config);
std::vector<ParamSpec> parameter_table(const ModelConfig& config, const LoraConfig& lora);

struct ParamCounts {
  int64_t total = 0;      // every parameter (adapters included, tied matrix once)
  int64_t base = 0;       // total - adapter
  int64_t adapter = 0;    // lora_A + lora_B
  int64_t trainable = 0;  // requires_grad after apply_lora
  std::vector<int64_t> per_layer_total;      // size L + 2 (layer index convention)
  std::vector<int64_t> per_layer_trainable;  // size L + 2
};

ParamCounts count_parameters(const ModelConfig& config, const LoraConfig& lora = LoraConfig::none());

// Bytes of one parameter as stored (model/precision.h: a frozen matrix in `base`, resolved; every
// other parameter float32), and of the whole model (tied matrix once).
int64_t stored_bytes(const ParamSpec& param, BaseDtype base);
int64_t stored_parameter_bytes(const ModelConfig& config, const LoraConfig& lora,
                               BaseDtype base);

// Forward FLOPs per token of each layer (size L + 2) at sequence length seq_len:
// 2 x (layer parameters) for the weights + the token-mixing term (attention scores and
// values, or the gated-delta chunk work). Units: FLOP per token (multiply-add = 2 FLOP).
std::vector<double> layer_forward_flops_per_token(const ModelConfig& config, int64_t seq_len);

// Token-mixing FLOPs of one training step (forward + backward) per token for one layer
// (docs/model-math.md, "FLOPs and MFU"): A 12 H d T, S 12 H d min(T, w),
// G 3 H [6 dk dv + C (5 dk + 3 dv)].
double mixing_training_flops_per_token(const ModelConfig& config, int64_t layer, int64_t seq_len);

// Token-mixing FLOPs per token that the configured kernel really executes (config.attn_impl;
// auto and sdpa count as blocked, whose tiles skip what is masked). A and S layers, with
// E = score entries computed per head (attention_tiling.h):
//   naive:   E = T^2 (masked entries too); forward 4 H hd E / T, backward 8 H hd E / T
//   blocked: E = visited_score_entries(T, window); forward 4 H hd E / T, backward
//            10 H hd E / T (backward recomputes q k^T: five tile products instead of four)
// G layers: the model term, one third forward and two thirds backward.
struct MixingFlops {
  double forward = 0;
  double backward = 0;
  double total() const { return forward + backward; }
};
MixingFlops mixing_executed_flops_per_token(const ModelConfig& config, int64_t layer,
                                            int64_t seq_len);

// Memory of one A or S layer's attention kernel (q, k, v and output excluded: every kernel
// holds those), for `micro_batch` sequences of seq_len tokens in `element_bytes` per element.
//   saved_bytes:     kept from forward to backward. naive: probabilities [B, H, T, T], the
//                    [T, T] bool mask and K/V repeated to H heads; blocked: the per-row
//                    log-sum-exp [B, H, T] and the grouped copies of q, k, v and the output.
//   transient_bytes: the largest extra working set inside the kernel, forward or backward.
//                    naive: three [B, H, T, T] tensors (scores, probabilities and their
//                    gradient live together in backward); blocked: three tiles
//                    [B, H, block, block] plus dq, dk, dv accumulators.
struct AttentionMemory {
  int64_t saved_bytes = 0;
  int64_t transient_bytes = 0;
};
AttentionMemory attention_memory(const ModelConfig& config, int64_t layer, int64_t seq_len,
                                 int64_t micro_batch, int64_t element_bytes = 4);

struct TrainingFlops {
  // "model FLOPs": 6 N + mixing, N = every parameter a matmul reads (tied matrix once);
  // the convention of the scaling-law / MFU literature, independent of what trains.
  double model_per_token = 0;
  // "executed FLOPs": LoRA-aware. Frozen weight 4 per parameter (forward + input gradient),
  // trainable 6, adapters 6 r (in + out), the mixing FLOPs the kernel executes
  // (mixing_executed_flops_per_token), plus one more forward of every block when activation
  // checkpointing recomputes it.
  double executed_per_token = 0;
  int64_t n_params = 0;  // N used in 6 N
};

// cp_pieces > 1: the sequence is split into that many pieces over context-parallel ranks
// (docs/strategies.md, "cp"); executed FLOPs then include the G layers' transition pass, the
// core run once more with d_k value columns on every piece but the first. Model FLOPs do not
// change.
TrainingFlops training_flops_per_token(const ModelConfig& config, const LoraConfig& lora,
                                       int64_t seq_len, int64_t cp_pieces = 1);

// Per-layer cost for the pipeline balancer (size L + 2, layer index convention), in executed
// training FLOP per token (forward + backward, LoRA- and checkpointing-aware). Sums to
// training_flops_per_token(...).executed_per_token. The embedding lookup costs 0 FLOP.
std::vector<double> layer_costs(const ModelConfig& config, const LoraConfig& lora, int64_t seq_len,
                                int64_t cp_pieces = 1);

}  // namespace hlp::model
