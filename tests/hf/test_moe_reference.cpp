// Qwen3-Next's sparse MoE layers against transformers 5.12 in training mode: the committed
// fixtures qwen3_next_moe_a / _b (tests/hf/transformers5/make_reference.py: a 2 x 65 batch,
// labels = input_ids, output_router_logits on) give transformers' loss = CE + coef x aux, the
// load-balancing loss alone, the CE alone, and how many tokens each sparse layer routed to each
// expert. HLP's model, loaded from the fixture with the load-balancing loss on, must give the
// same: counts exactly, the three losses within 1e-5 relative in float32 (the fp64 difference
// from transformers' fp64 model is printed).
#include "catch_compat.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/hf/checkpoint.h"
#include "model/hf/config_json.h"
#include "model/hf/peft.h"
#include "model/hybrid_lm.h"
#include "model/moe.h"
#include "parallel/strategy_util.h"

using namespace hlp::model;

namespace {

std::string fixtures() { return HLP_TRANSFORMERS5_FIXTURES; }

// The batch: one sequence of ids a line
torch::Tensor read_batch(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int64_t>> rows;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    rows.emplace_back();
    for (int64_t id; ids >> id;) rows.back().push_back(id);
  }
  REQUIRE(rows.size() == 2);
  auto batch = torch::empty({int64_t(rows.size()), int64_t(rows[0].size())}, torch::kLong);
  for (size_t r = 0; r < rows.size(); ++r) {
    REQUIRE(rows[r].size() == rows[0].size());
    for (size_t t = 0; t < rows[r].size(); ++t) batch[int64_t(r)][int64_t(t)] = rows[r][t];
  }
  return batch;
}

HybridLM load(const std::string& dir, torch::Dtype dtype) {
  ModelConfig c = hf::read_hf_config(dir).config;
  c.moe_aux_loss = true;  // transformers' output_router_logits=True
  c.kernels = dtype == torch::kDouble ? Kernels::reference : c.kernels;
  HybridLM model(c, /*seed=*/1);
  hf::HfCheckpoint checkpoint(dir);
  hf::load_held(checkpoint, hf::expected_base_tensors(c),
                hlp::parallel::whole_held_tensors(*model, /*primary=*/true));
  model->to(dtype);
  model->train();
  return model;
}

}  // namespace

TEST_CASE("Qwen3-Next MoE: training loss, load-balancing loss and expert counts equal "
          "transformers'", "[hf][moe]") {
  for (const char* name : {"qwen3_next_moe_a", "qwen3_next_moe_b"}) {
    INFO(name);
    const std::string dir = fixtures() + "/" + name;
    const auto ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"))["train"];
    const auto batch = read_batch(dir + "/train_tokens.txt");
    const int64_t T = batch.size(1);
    for (auto dtype : {torch::kFloat, torch::kDouble}) {
      const auto want = ref[dtype == torch::kFloat ? "loss_fp32" : "loss_fp64"];
      auto model = load(dir, dtype);
      const auto& c = model->config();
      REQUIRE(c.count_moe_layers() > 0);
      // 1. the parts: CE of the logits over the T - 1 shifted positions, aux from this forward
      torch::Tensor ce, aux;
      std::vector<torch::Tensor> logits;
      auto live = [&](bool on) {  // the sparse layers keep their logits for the test
        for (int64_t b = 0; b < model->num_blocks(); ++b)
          if (model->block(b)->moe) model->block(b)->moe->set_record_live_logits(on);
      };
      {
        torch::NoGradGuard no_grad;
        live(true);
        const auto x = model->forward_blocks(model->embed(batch));
        const auto out = model->head(x).narrow(1, 0, T - 1);
        ce = torch::nn::functional::cross_entropy(out.reshape({-1, out.size(2)}),
                                                  batch.narrow(1, 1, T - 1).reshape({-1}));
        for (int64_t b = 0; b < model->num_blocks(); ++b)
          if (model->block(b)->moe)
            for (auto& l : model->block(b)->moe->take_router_logits()) logits.push_back(l);
        aux = load_balancing_loss(logits, c.moe_top_k);
        live(false);
      }
      // 2. HybridLM::loss of the same forward (the training path: records) adds coef x aux itself
      const auto x = model->forward_blocks(model->embed(batch));
      const auto total = model->loss(x.narrow(1, 0, T - 1), batch.narrow(1, 1, T - 1));
      auto rel = [](double got, double want) { return std::abs(got - want) / std::abs(want); };
      const double d_total = rel(total.item<double>(), want["loss"].get<double>());
      const double d_aux = rel(aux.item<double>(), want["aux_loss"].get<double>());
      const double d_ce = rel(ce.item<double>(), want["ce_loss"].get<double>());
      UNSCOPED_INFO(name << (dtype == torch::kFloat ? " fp32" : " fp64") << ": loss "
                         << total.item<double>() << " (transformers " << want["loss"].get<double>()
                         << ", " << d_total << " relative), aux " << d_aux << ", ce " << d_ce);
      if (dtype == torch::kFloat) {
        CHECK(d_total <= 1e-5);
        CHECK(d_aux <= 1e-5);
        CHECK(d_ce <= 1e-5);
        // the tokens each sparse layer sent to each expert (top-K of the float32 softmax)
        size_t i = 0;
        for (int64_t layer = 0; layer < c.num_layers(); ++layer) {
          if (!c.is_moe_layer(layer)) continue;
          const auto chosen =
              std::get<1>(torch::topk(torch::softmax(logits[i++], -1, torch::kFloat), c.moe_top_k));
          const auto counts = torch::bincount(chosen.reshape({-1}), {}, c.moe_experts);
          const auto expected = ref["tokens_per_expert"][std::to_string(layer)].get<std::vector<int64_t>>();
          for (int64_t e = 0; e < c.moe_experts; ++e)
            CHECK(counts[e].item<int64_t>() == expected[size_t(e)]);
        }
        CHECK(i == logits.size());
      } else {
        CHECK(d_total <= 1e-5);  // transformers' fp64 model still rounds to float32 in places
        CHECK(d_aux <= 1e-5);
      }
    }
  }
}
