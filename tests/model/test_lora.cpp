// LoRA: a fresh adapter is a no-op, merging is exact, only adapters (and saved modules) get
// gradients, and the accounting's trainable count equals the model's.
#include "catch_compat.h"
#include <torch/torch.h>

#include "common/error.h"
#include "model/accounting.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "test_helpers.h"

using namespace hlp::model;

namespace {

torch::Tensor tokens_for(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(c.vocab, {B, T}, torch::kLong);
}

void randomize_lora_B(HybridLM& model) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(99);
  for (auto& [name, linear] : model->named_linears())
    if (linear->has_lora()) linear->lora_B.normal_(0, 0.05);
}

}  // namespace

TEST_CASE("model: a fresh LoRA model's logits equal the base model's", "[model][lora]") {
  auto c = preset("tiny");
  HybridLM base(c, 11), adapted(c, 11);
  auto report = apply_lora(adapted, make_lora_config(4, 8, 0.0, "all-linear"));
  CHECK(report.adapted_modules == static_cast<int64_t>(linear_table(c).size()));
  auto tokens = tokens_for(c, 2, 24, 1);
  CHECK(torch::equal(adapted->forward(tokens), base->forward(tokens)));
}

TEST_CASE("model: merged LoRA equals unmerged LoRA", "[model][lora]") {
  auto c = preset("tiny");
  HybridLM model(c, 12);
  model->to(torch::kFloat64);
  HybridLM base(c, 12);
  base->to(torch::kFloat64);
  apply_lora(model, make_lora_config(4, 8, 0.0, "q_proj,k_proj,v_proj,o_proj,gate_proj,down_proj"));
  randomize_lora_B(model);
  auto tokens = tokens_for(c, 2, 24, 2);
  auto unmerged = model->forward(tokens);
  CHECK_FALSE(torch::allclose(unmerged, base->forward(tokens), 0, 1e-6));  // adapters matter
  merge_lora(model);
  auto merged = model->forward(tokens);
  CHECK(torch::allclose(merged, unmerged, 1e-10, 1e-10));
  for (auto& [name, linear] : model->named_linears()) linear->unmerge();
  CHECK(torch::allclose(model->forward(tokens), unmerged, 1e-10, 1e-10));
}

TEST_CASE("model: only adapter parameters (and saved modules) get gradients", "[model][lora]") {
  auto c = preset("tiny");
  HybridLM model(c, 13);
  auto lora = make_lora_config(4, 8, 0.0, "q_proj,v_proj", "final_norm");
  apply_lora(model, lora);
  randomize_lora_B(model);
  auto tokens = tokens_for(c, 2, 16, 3);
  auto loss = hlp::model::cross_entropy_loss(model->forward(tokens), tokens);
  loss.backward();
  int64_t adapters = 0;
  for (const auto& item : model->named_parameters()) {
    const auto& name = item.key();
    const bool adapter = name.find(".lora_") != std::string::npos;
    const bool saved = name == "final_norm.weight";
    INFO(name);
    CHECK(item.value().requires_grad() == (adapter || saved));
    if (adapter || saved) {
      REQUIRE(item.value().grad().defined());
      CHECK(item.value().grad().abs().sum().item<double>() > 0);
      adapters += adapter;
    } else {
      CHECK_FALSE(item.value().grad().defined());
    }
  }
  CHECK(adapters == 2 * 2 * c.num_layers());  // q_proj and v_proj in every layer, A and B
}

TEST_CASE("model: rank 0 is a full finetune: every parameter trains", "[model][lora]") {
  auto c = preset("tiny");
  HybridLM model(c, 14);
  auto report = apply_lora(model, LoraConfig::none());
  CHECK(report.adapted_modules == 0);
  CHECK(report.trainable_params == report.total_params);
  CHECK(report.total_params == count_parameters(c).total);
}

TEST_CASE("model: trainable counts of the model equal the accounting", "[model][lora][accounting]") {
  auto c = preset("tiny");
  for (const auto& targets : {std::string("q_proj,k_proj,v_proj,o_proj"), std::string("all-linear"),
                              std::string("re:blocks\\.[02]\\..*"), std::string("mlp.up_proj")}) {
    HybridLM model(c, 15);
    auto lora = make_lora_config(3, 6, 0.0, targets, "mixer_norm");
    auto report = apply_lora(model, lora);
    auto counts = count_parameters(c, lora);
    INFO(targets);
    CHECK(report.trainable_params == counts.trainable);
    CHECK(report.total_params == counts.total);
    int64_t optimizer_numel = 0;
    for (const auto& p : trainable_parameters(*model)) optimizer_numel += p.numel();
    CHECK(optimizer_numel == counts.trainable);
  }
}

TEST_CASE("model: LoRA targets that select nothing are a user error", "[model][lora]") {
  HybridLM model(preset("tiny"), 16);
  CHECK_THROWS_AS(apply_lora(model, make_lora_config(4, 8, 0, "qkv")), hlp::UserError);
}

TEST_CASE("model: LoRA adapters are a deterministic function of (seed, name)", "[model][lora]") {
  auto c = preset("tiny");
  HybridLM whole(c, 17);
  HybridLM part(c, 17, 2, 4, false, true);
  apply_lora(whole, LoraConfig{});
  apply_lora(part, LoraConfig{});
  auto whole_params = whole->named_parameters();
  for (const auto& item : part->named_parameters()) {
    INFO(item.key());
    REQUIRE(whole_params.contains(item.key()));
    CHECK(torch::equal(item.value(), whole_params[item.key()]));
  }
}
