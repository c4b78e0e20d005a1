#include "model/hybrid_lm.h"

#include "model/chunked_loss.h"

#include "common/error.h"
#include "model/half_emulation.h"
#include "model/init.h"

namespace hlp::model {

HybridLMImpl::HybridLMImpl(const ModelConfig& config, uint64_t seed, Values values)
    : HybridLMImpl(config, seed, 0, config.num_layers(), true, true, values) {}

HybridLMImpl::HybridLMImpl(const ModelConfig& config, uint64_t seed, int64_t first_block,
                           int64_t end_block, bool has_embedding, bool has_head, Values values)
    : config_(config),
      seed_(seed),
      first_block_(first_block),
      has_embedding_(has_embedding),
      has_head_(has_head) {
  config_.validate();
  if (config.moe_aux_loss && config.count_moe_layers() > 0 && config.activation_checkpointing)
    throw user_error("--activation-checkpointing with the load-balancing loss (output_router_logits "
                     "true in the config.json) is not implemented yet (a recomputed block would "
                     "record its router logits twice); drop one of them");
  if (first_block < 0 || end_block > config.num_layers() || first_block > end_block)
    throw user_error("model part: blocks [", first_block, ", ", end_block,
                     ") is not a range inside the ", config.num_layers(), " layers of pattern ",
                     config.pattern);
  // deferred: each part's bytes go as soon as it exists, so building holds one part at a time
  const bool deferred = values == Values::deferred;
  auto settle = [deferred](const torch::nn::Module& part) {
    if (deferred)
      for (const auto& p : part.parameters(/*recurse=*/true)) release_parameter(p);
  };
  // Registration order = accounting.cpp parameter_table order.
  if (has_embedding || (has_head && config.tied_embeddings)) {
    // (the Embedding's own default init draws from the global generator, in both modes alike)
    embed_tokens = register_module(
        "embed_tokens", torch::nn::Embedding(torch::nn::EmbeddingOptions(config.vocab, config.hidden)));
    settle(*embed_tokens);
  }
  auto holder = register_module("blocks", std::make_shared<torch::nn::Module>());
  for (int64_t layer = first_block; layer < end_block; ++layer) {
    blocks_.push_back(holder->register_module(std::to_string(layer), Block(config, layer)));
    settle(*blocks_.back());
  }
  if (has_head) {
    final_norm = register_module("final_norm", RMSNorm(config.hidden, config.rms_eps));
    settle(*final_norm);
    if (!config.tied_embeddings) {
      // (LibTorch refuses a dot in a parameter name: "lm_head.weight" = module lm_head, "weight")
      auto head_holder = register_module("lm_head", std::make_shared<torch::nn::Module>());
      lm_head = head_holder->register_parameter("weight", torch::empty({config.vocab, config.hidden}));
      if (deferred) release_parameter(lm_head);
    }
  }
  if (!deferred)
    for (auto& item : named_parameters(/*recurse=*/true)) init_parameter(item.key(), item.value(), seed);
  set_kernels(config.kernels);
}

torch::Tensor HybridLMImpl::embed(const torch::Tensor& tokens) {
  TORCH_CHECK(has_embedding_, "this model part has no embedding");
  // [B, T] -> [B, T, D]: the residual stream is float32 whatever the table's storage
  // (--base-dtype): the rows looked up from a 16-bit table are widened, not the table.
  auto h = embed_tokens->forward(tokens);
  return h.scalar_type() == torch::kFloat || h.scalar_type() == torch::kDouble ? h
                                                                                : h.to(torch::kFloat);
}

Block HybridLMImpl::block(int64_t i) const {
  TORCH_CHECK(i >= 0 && i < num_blocks(), "block ", i, " out of range [0, ", num_blocks(), ")");
  return blocks_[static_cast<size_t>(i)];
}

torch::Tensor HybridLMImpl::forward_blocks(torch::Tensor x) {
  for (auto& b : blocks_) x = b->forward(x);
  return x;
}

torch::Tensor HybridLMImpl::lm_head_weight() const {
  TORCH_CHECK(has_head_, "this model part has no head");
  return config_.tied_embeddings ? embed_tokens->weight : lm_head;
}

torch::Tensor HybridLMImpl::head(const torch::Tensor& x) {
  // [B, T, D] -> [B, T, V]
  return model::matmul(final_norm->forward(x), lm_head_weight().t());  // fp16-emulated on CPU fp16
}

torch::Tensor HybridLMImpl::loss(const torch::Tensor& x, const torch::Tensor& targets) {
  torch::Tensor ce;
  if (config_.loss_impl == LossImpl::full) {
    ce = model::cross_entropy_loss(head(x), targets);
  } else {
    const auto h = final_norm->forward(x);  // [B, T, D]
    ce = chunked_linear_cross_entropy(h.reshape({-1, h.size(-1)}), lm_head_weight(),
                                      targets.reshape({-1}));
  }
  // Qwen3-Next with output_router_logits: + coef x the load-balancing loss of this forward's
  // sparse layers (moe.h), as transformers adds it; the registry keeps this to runs where one
  // part holds every block (no pp, no cp)
  std::vector<std::shared_ptr<RouterRecord>> records;
  for (auto& b : blocks_)
    if (b->moe)
      for (auto& r : b->moe->take_router_records()) records.push_back(std::move(r));
  if (records.empty()) return ce;
  // the value here; the gradient through each sparse layer's own backward (moe.h)
  return add_load_balancing_loss(ce, records, config_.moe_top_k, config_.moe_aux_coef);
}

torch::Tensor HybridLMImpl::forward_loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  TORCH_CHECK(has_embedding_ && has_head_ && num_blocks() == config_.num_layers(),
              "forward_loss(tokens) needs the whole model; a part uses embed / block / loss");
  return loss(forward_blocks(embed(tokens)), targets);
}

torch::Tensor HybridLMImpl::forward(const torch::Tensor& tokens) {
  TORCH_CHECK(has_embedding_ && has_head_ && num_blocks() == config_.num_layers(),
              "forward(tokens) needs the whole model; a part uses embed / block / head");
  return head(forward_blocks(embed(tokens)));
}

std::vector<std::pair<std::string, LoRALinear>> HybridLMImpl::named_linears() {
  std::vector<std::pair<std::string, LoRALinear>> out;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    if (auto linear = std::dynamic_pointer_cast<LoRALinearImpl>(item.value()))
      out.emplace_back(item.key(), LoRALinear(linear));
  }
  return out;
}

void HybridLMImpl::set_activation_checkpointing(bool on) {
  config_.activation_checkpointing = on;
  for (auto& b : blocks_) b->set_activation_checkpointing(on);
}

void HybridLMImpl::set_gdn_mode(GdnMode mode) {
  config_.gdn_mode = mode;
  for (auto& b : blocks_)
    if (b->gdn) b->gdn->mode = mode;
}

void HybridLMImpl::set_kernels(Kernels kernels) {
  config_.kernels = kernels;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto norm = std::dynamic_pointer_cast<RMSNormImpl>(module)) norm->kernels = kernels;
    if (auto mlp = std::dynamic_pointer_cast<SwiGLUImpl>(module)) mlp->kernels = kernels;
    if (auto gdn = std::dynamic_pointer_cast<GatedDeltaNetImpl>(module)) gdn->set_kernels(kernels);
  }
}

void HybridLMImpl::set_loss_impl(LossImpl impl) { config_.loss_impl = impl; }

void HybridLMImpl::set_attn_impl(AttnImpl impl) {
  config_.attn_impl = impl;
  for (auto& b : blocks_)
    if (b->attention) b->attention->attn_impl = impl;
}

torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
}

}  // namespace hlp::model
