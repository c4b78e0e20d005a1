#pragma once
// HybridLM: embedding -> blocks (one per letter of the pattern) -> final RMSNorm + LM head.
// The model knows nothing about parallelism (beyond the ContextShard hook of context_shard.h,
// which its G, A and S layers consult); strategies use these pieces from outside:
//   embed(tokens)      [B, T] int64 -> [B, T, D]           (first pipeline stage)
//   block(i)->forward  [B, T, D] -> [B, T, D]              (any stage; i = position among held)
//   head(x)            [B, T, D] -> logits [B, T, V]        (last stage)
//   named_parameters() stable PEFT-like names, e.g. "blocks.3.mixer.q_proj.weight",
//                      "blocks.3.mlp.down_proj.lora_B", "embed_tokens.weight", "final_norm.weight"
//   named_linears()    every projection (LoRALinear) with its full module name (tensor parallel)
//
// A pipeline stage builds only its part: HybridLM(config, seed, first_block, end_block,
// has_embedding, has_head) allocates blocks [first_block, end_block) (named by their global
// index) and the embedding / head only if asked. Every parameter's value is a function of
// (seed, name) (init.h), so the parts of different stages equal the single-process model's.
// With tied embeddings, a stage with the head but without the embedding still holds
// "embed_tokens.weight" (the LM head matrix); if it is trainable, the strategy must all-reduce
// its gradient between the first and last stage.
//
// Values::deferred builds the same module tree with every parameter's bytes dropped as soon as
// its part (the embedding, one block, the head) is registered: shapes, dtypes, names and the
// global generator's draws are those of Values::drawn, but the parameters hold nothing until
// init.h's materialise_parameter gives each its value (bit-identical to Values::drawn). Strategies
// that keep only rows or slices materialise one parameter at a time and keep their part of it, so
// a rank never holds the whole model while it is built. Forward needs every parameter filled.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/lora_linear.h"

namespace hlp::model {

// When the parameters get their values: at construction, or later one at a time (see above).
enum class Values { drawn, deferred };

class HybridLMImpl : public torch::nn::Module {
 public:
  // The whole model.
  explicit HybridLMImpl(const ModelConfig& config, uint64_t seed = 0, Values values = Values::drawn);
  // A part: blocks [first_block, end_block) of the pattern, plus embedding / head if asked.
  HybridLMImpl(const ModelConfig& config, uint64_t seed, int64_t first_block, int64_t end_block,
               bool has_embedding, bool has_head, Values values = Values::drawn);

  torch::Tensor embed(const torch::Tensor& tokens);  // [B, T] int64 -> [B, T, D]
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }  // held blocks
  int64_t first_block() const { return first_block_; }  // layer index of block(0)
  int64_t end_block() const { return first_block_ + num_blocks(); }
  Block block(int64_t i) const;                       // i in [0, num_blocks())
  torch::Tensor forward_blocks(torch::Tensor x);      // all held blocks in order
  torch::Tensor head(const torch::Tensor& x);         // [B, T, D] -> [B, T, V]
  // [B, T, D] (the blocks' output), targets [B, T] -> mean next-token cross entropy of head(x),
  // computed as config().loss_impl says (chunked: no [B, T, V] logits held; chunked_loss.h)
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& targets);
  // whole model only: [B, T] tokens -> loss(blocks(embed(tokens)), targets)
  torch::Tensor forward_loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  torch::Tensor forward(const torch::Tensor& tokens);  // whole model only: [B, T] -> [B, T, V]

  // Every projection with its full module name, e.g. {"blocks.3.mixer.q_proj", linear}.
  std::vector<std::pair<std::string, LoRALinear>> named_linears();

  void set_activation_checkpointing(bool on);
  void set_gdn_mode(GdnMode mode);
  void set_kernels(Kernels kernels);
  void set_loss_impl(LossImpl impl);  // every RMSNorm, SwiGLU and G layer of this model
  void set_attn_impl(AttnImpl impl);  // every A and S layer

  const ModelConfig& config() const { return config_; }
  uint64_t seed() const { return seed_; }
  bool has_embedding() const { return has_embedding_; }
  bool has_head() const { return has_head_; }
  // The LM head matrix [V, D]: embed_tokens.weight when tied, else lm_head.weight.
  torch::Tensor lm_head_weight() const;

  torch::nn::Embedding embed_tokens{nullptr};  // "embed_tokens.weight" [V, D]
  RMSNorm final_norm{nullptr};                 // "final_norm.weight" [D]
  torch::Tensor lm_head;                       // "lm_head.weight" [V, D], untied configs only

 private:
  ModelConfig config_;
  uint64_t seed_;
  int64_t first_block_;
  bool has_embedding_, has_head_;
  std::vector<Block> blocks_;
};
TORCH_MODULE(HybridLM);

// Mean next-token cross entropy over all positions. logits [B, T, V], targets [B, T] int64.
torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace hlp::model
