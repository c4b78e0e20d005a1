// The sparse MoE layer (model/moe.h) on its own, in float64: its dispatch equals every expert run
// on every token with the routing weights as a dense mask; and the load-balancing loss's
// gradient, which HybridLM hands each sparse layer inside its own backward, equals autograd's of
// the formula on the live router logits, also when the loss arrives scaled (micro-batch weights).
#include "catch_compat.h"

#include <cmath>

#include "model/hybrid_lm.h"
#include "model/moe.h"

using namespace hlp::model;

namespace {

ModelConfig moe_config(bool aux) {
  ModelConfig c = preset("tiny");  // GAGS
  c.kernels = Kernels::reference;
  c.moe_layers = "E-EE";
  c.moe_experts = 5;
  c.moe_top_k = 2;
  c.moe_hidden = 24;
  c.moe_shared_hidden = 40;
  c.moe_norm_topk = false;
  c.moe_aux_coef = 0.05;
  c.moe_aux_loss = aux;
  c.validate();
  return c;
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item<double>();
}

}  // namespace

TEST_CASE("MoE: dispatch equals the dense mixture of every expert", "[model][moe]") {
  for (bool norm : {false, true}) {
    ModelConfig c = moe_config(false);
    c.moe_norm_topk = norm;
    torch::manual_seed(3);
    SparseMoe moe(c);
    for (auto& p : moe->parameters()) p.data().normal_(0, 0.3);
    moe->to(torch::kDouble);
    const auto x = torch::randn({2, 7, c.hidden}, torch::kDouble);
    const auto got = moe->forward(x);
    // the reference: softmax (float32, as transformers), top-k, a dense [N, E] weight matrix
    const auto rows = x.reshape({-1, c.hidden});
    const auto p = torch::softmax(moe->gate->forward(rows), -1, torch::kFloat);
    auto [w, idx] = torch::topk(p, c.moe_top_k, -1);
    if (norm) w = w / w.sum(-1, true);
    const auto dense = torch::zeros({rows.size(0), c.moe_experts}, torch::kDouble)
                           .scatter(1, idx, w.to(torch::kDouble));
    auto want = torch::zeros_like(rows);
    for (int64_t e = 0; e < c.moe_experts; ++e)
      want += dense.select(1, e).unsqueeze(1) * moe->experts[size_t(e)]->forward(rows.unsqueeze(0)).squeeze(0);
    want += torch::sigmoid(moe->shared_expert_gate->forward(rows)) * moe->shared_expert->forward(rows.unsqueeze(0)).squeeze(0);
    CHECK(max_relative(got.reshape({-1, c.hidden}), want) < 1e-13);
  }
}

TEST_CASE("MoE: the load-balancing loss's gradient through each layer equals autograd's",
          "[model][moe]") {
  const auto tokens = torch::randint(0, 200, {2, 12}, torch::kLong);
  const auto targets = torch::randint(0, 200, {2, 12}, torch::kLong);
  for (double scale : {1.0, 0.37}) {
    INFO("loss scale " << scale);
    // HLP's path: HybridLM::loss adds coef x aux, its gradient injected per layer
    HybridLM injected(moe_config(true), /*seed=*/5);
    injected->to(torch::kDouble);
    injected->train();
    const auto loss_a = injected->forward_loss(tokens, targets);
    (loss_a * scale).backward();
    // the formula on the live logits, differentiated by autograd
    HybridLM live(moe_config(false), /*seed=*/5);
    live->to(torch::kDouble);
    live->train();
    for (int64_t b = 0; b < live->num_blocks(); ++b)
      if (live->block(b)->moe) live->block(b)->moe->set_record_live_logits(true);
    auto loss_b = live->forward_loss(tokens, targets);
    std::vector<torch::Tensor> logits;
    for (int64_t b = 0; b < live->num_blocks(); ++b)
      if (live->block(b)->moe)
        for (auto& l : live->block(b)->moe->take_router_logits()) logits.push_back(l);
    REQUIRE(logits.size() == 3);
    const auto aux = load_balancing_loss(logits, 2);
    loss_b = loss_b + 0.05 * aux;
    (loss_b * scale).backward();
    CHECK(std::abs(loss_a.item<double>() - loss_b.item<double>()) < 1e-13 * loss_b.item<double>());
    CHECK(aux.item<double>() > 0);
    const auto a = injected->named_parameters(), b = live->named_parameters();
    int64_t routers = 0;
    for (const auto& item : b) {
      const auto& gb = item.value().grad();
      const auto& ga = a[item.key()].grad();
      REQUIRE(ga.defined() == gb.defined());
      if (!gb.defined()) continue;
      INFO(item.key());
      CHECK(max_relative(ga, gb) < 1e-11);
      routers += item.key().find("mlp.gate.weight") != std::string::npos;
    }
    CHECK(routers == 3);
    // and the aux term matters: without it the router gradients differ
    HybridLM plain(moe_config(false), /*seed=*/5);
    plain->to(torch::kDouble);
    plain->train();
    (plain->forward_loss(tokens, targets) * scale).backward();
    CHECK(max_relative(plain->named_parameters()["blocks.0.mlp.gate.weight"].grad(),
                       b["blocks.0.mlp.gate.weight"].grad()) > 1e-6);
  }
}
