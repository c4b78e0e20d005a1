// Finite-difference gradient checks (float64) for every block type, the whole model, and
// LoRALinear; activation checkpointing gives the same gradients as storing activations.
#include <ATen/autocast_mode.h>
#include "model/autocast_state.h"
#include "catch_compat.h"
#include <torch/torch.h>

#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "test_helpers.h"

using namespace hlp::model;
using hlp::model::testing::gradcheck;
using hlp::model::testing::micro_config;

namespace {

void check_block(const std::string& pattern, GdnMode mode,
                 GdnVariant variant = GdnVariant::gated_deltanet) {
  auto c = micro_config(pattern);
  c.gdn_mode = mode;
  c.gdn_variant = variant;
  c.gdn_dconv_reduction = 2;
  HybridLM model(c, 31);
  model->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;  // JetBlock's w2 starts at 0: make the generator path non-trivial
    torch::manual_seed(30);
    for (auto& item : model->named_parameters())
      if (item.key().find("kernel_generator.w2.weight") != std::string::npos)
        item.value().normal_(0, 0.3);
  }
  auto block = model->block(0);
  torch::manual_seed(8);
  auto x = torch::randn({2, 7, c.hidden}, torch::kFloat64).requires_grad_(true);  // 7: not a multiple of chunk 4
  std::vector<torch::Tensor> inputs{x};
  for (const auto& p : block->parameters()) inputs.push_back(p);
  auto result = gradcheck([&] { return block->forward(x); }, inputs);
  INFO(pattern << ": max abs error " << result.max_abs_error << ", max rel error "
               << result.max_rel_error << " over " << result.entries << " entries");
  CHECK(result.entries > 100);
  CHECK(result.max_rel_error < 1e-5);
}

}  // namespace

TEST_CASE("model: gradcheck: gated delta block (chunked core)", "[model][gradcheck]") {
  check_block("G", GdnMode::chunked);
}

TEST_CASE("model: gradcheck: gated delta block (recurrent core)", "[model][gradcheck]") {
  check_block("G", GdnMode::recurrent);
}

TEST_CASE("model: gradcheck: JetBlock gated delta block (dynamic conv)", "[model][gradcheck]") {
  check_block("G", GdnMode::chunked, GdnVariant::jetblock);
}

TEST_CASE("model: gradcheck: full attention block", "[model][gradcheck]") {
  check_block("A", GdnMode::chunked);
}

TEST_CASE("model: gradcheck: sliding-window attention block", "[model][gradcheck]") {
  check_block("S", GdnMode::chunked);
}

TEST_CASE("model: gradcheck: whole model with LoRA adapters (loss w.r.t. trainable parameters)",
          "[model][gradcheck][lora]") {
  auto c = micro_config("GAS");
  c.gdn_variant = GdnVariant::jetblock;
  c.gdn_dconv_reduction = 2;
  HybridLM model(c, 32);
  model->to(torch::kFloat64);
  apply_lora(model, make_lora_config(2, 4, 0.0, "all-linear", "final_norm,embed_tokens"));
  {
    torch::NoGradGuard no_grad;  // non-zero B so that gradients reach A
    for (auto& [name, linear] : model->named_linears()) linear->lora_B.normal_(0, 0.1);
  }
  torch::manual_seed(9);
  auto tokens = torch::randint(c.vocab, {2, 6}, torch::kLong);
  auto targets = torch::randint(c.vocab, {2, 6}, torch::kLong);
  auto result = gradcheck([&] { return hlp::model::cross_entropy_loss(model->forward(tokens), targets); },
                          trainable_parameters(*model), 1e-6, 10);
  INFO("max abs error " << result.max_abs_error << " over " << result.entries << " entries");
  CHECK(result.entries > 100);
  CHECK(result.max_rel_error < 1e-5);
}

namespace {

// bf16: float32 model, CPU autocast to bfloat16 around the forward only (as the strategies do),
// so the checkpoint's recompute in backward must restore the forward's autocast state itself.
std::map<std::string, torch::Tensor> gradients_of(bool checkpointing, const LoraConfig& lora,
                                                  bool bf16 = false) {
  auto c = hlp::model::preset("tiny").with_pattern("GASG");
  c.gdn_chunk = 16;
  HybridLM model(c, 33);
  if (!bf16) model->to(torch::kFloat64);
  apply_lora(model, lora);
  if (!lora.full_finetune()) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(12);
    for (auto& [name, linear] : model->named_linears())
      if (linear->has_lora()) linear->lora_B.normal_(0, 0.1);
  }
  model->set_activation_checkpointing(checkpointing);
  model->train();
  torch::manual_seed(10);
  auto tokens = torch::randint(c.vocab, {2, 40}, torch::kLong);
  torch::manual_seed(11);  // dropout masks draw from here
  torch::Tensor loss;
  if (bf16) {
    hlp::model::set_autocast(at::kCPU, true, at::kBFloat16);
  }
  loss = hlp::model::cross_entropy_loss(model->forward(tokens), tokens);
  if (bf16) {
    hlp::model::set_autocast(at::kCPU, false, at::kBFloat16);
    at::autocast::clear_cache();
  }
  loss.backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& item : model->named_parameters())
    if (item.value().grad().defined()) grads[item.key()] = item.value().grad().clone();
  return grads;
}

void check_same_gradients(const LoraConfig& lora, bool bf16 = false) {
  auto stored = gradients_of(false, lora, bf16);
  auto recomputed = gradients_of(true, lora, bf16);
  REQUIRE(!stored.empty());
  REQUIRE(stored.size() == recomputed.size());
  for (const auto& [name, grad] : stored) {
    INFO(name);
    REQUIRE(recomputed.count(name) == 1);
    CHECK(torch::allclose(recomputed[name], grad, 1e-12, 1e-12));
  }
}

}  // namespace

TEST_CASE("model: activation checkpointing gives identical gradients (full finetune)", "[model][checkpoint]") {
  check_same_gradients(LoraConfig::none());
}

TEST_CASE("model: activation checkpointing gives identical gradients (LoRA with dropout, frozen embedding)",
          "[model][checkpoint][lora]") {
  check_same_gradients(make_lora_config(4, 8, 0.2, "q_proj,k_proj,v_proj,o_proj,up_proj"));
}

TEST_CASE("model: activation checkpointing recomputes under the forward's bf16 autocast (same gradients)",
          "[model][checkpoint][bf16]") {
  // Without restoring autocast, the recompute ran in float32 and the gradients differed by
  // about 1e-2 relative from storing the bf16 activations.
  check_same_gradients(make_lora_config(4, 8, 0.0, "q_proj,k_proj,v_proj,o_proj,up_proj"), true);
}
