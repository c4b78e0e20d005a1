// HybridLM: names and shapes equal the accounting's table, init depends only on (seed, name),
// model parts compose to the whole model, float64 works, and the tiny model learns.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // for the listener below
#include "catch_compat.h"
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>

#include "common/error.h"
#include "model/accounting.h"
#include "model/hybrid_lm.h"
#include "model/init.h"
#include "model/lora.h"
#include "test_helpers.h"

using namespace hlp::model;

namespace {
// One intra-op thread for every model test (ctest also sets OMP_NUM_THREADS=1).
struct SingleThreadListener : Catch::TestEventListenerBase {
  using Catch::TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override { at::set_num_threads(1); }
};
}  // namespace
CATCH_REGISTER_LISTENER(SingleThreadListener)

TEST_CASE("model: parameter names and shapes equal the accounting table", "[model]") {
  for (const std::string pattern : {"GAGS", "SGA", "GAGA"}) {
    auto c = preset("tiny").with_pattern(pattern);
    if (pattern == "SGA") c.gdn_variant = GdnVariant::jetblock;
    if (pattern == "GAGA") {  // Qwen3-Next's layers with sparse MoE MLPs in three of four
      c = preset("small-moe");
      c.pattern = pattern;
      c.moe_layers = "E-EE";
      c.validate();
    }
    HybridLM model(c, 1);
    auto lora = make_lora_config(2, 4, 0, "q_proj,g_proj,down_proj");
    apply_lora(model, lora);
    std::map<std::string, std::vector<int64_t>> expected;
    for (const auto& p : parameter_table(c, lora)) expected[p.name] = p.shape;
    std::map<std::string, std::vector<int64_t>> actual;
    for (const auto& item : model->named_parameters())
      actual[item.key()] = item.value().sizes().vec();
    CHECK(actual == expected);
  }
  HybridLM model(preset("tiny"), 1);
  auto params = model->named_parameters();
  CHECK(params.contains("blocks.0.mixer.q_proj.weight"));
  CHECK(params.contains("blocks.1.mixer.q_proj.bias"));  // attention q,k,v bias
  CHECK_FALSE(params.contains("blocks.1.mixer.o_proj.bias"));
  CHECK(params.contains("blocks.3.mlp.down_proj.weight"));
  CHECK(params.contains("embed_tokens.weight"));
  CHECK(params.contains("final_norm.weight"));
}

TEST_CASE("model: init is a function of (seed, name): same seed equal, other seed different", "[model]") {
  auto c = preset("tiny");
  HybridLM a(c, 5), b(c, 5), other(c, 6);
  auto pb = b->named_parameters(), po = other->named_parameters();
  for (const auto& item : a->named_parameters()) {
    CHECK(torch::equal(item.value(), pb[item.key()]));
  }
  CHECK_FALSE(torch::equal(a->named_parameters()["blocks.0.mixer.q_proj.weight"],
                           po["blocks.0.mixer.q_proj.weight"]));
  // A_log, dt_bias follow their reference distributions
  auto dt_bias = a->named_parameters()["blocks.0.mixer.dt_bias"];
  auto dt = torch::softplus(dt_bias);
  CHECK(dt.min().item<double>() >= 1e-3 - 1e-7);
  CHECK(dt.max().item<double>() <= 0.1 + 1e-7);
}

TEST_CASE("model: pipeline-style parts compose to the whole model", "[model]") {
  auto c = preset("tiny").with_pattern("GAGSG");
  HybridLM whole(c, 21);
  HybridLM first(c, 21, 0, 2, /*has_embedding=*/true, /*has_head=*/false);
  HybridLM middle(c, 21, 2, 3, false, false);
  HybridLM last(c, 21, 3, 5, false, true);
  CHECK(first->num_blocks() == 2);
  CHECK(middle->first_block() == 2);
  CHECK(last->block(0)->layer_index() == 3);
  CHECK_FALSE(middle->named_parameters().contains("embed_tokens.weight"));
  CHECK(last->named_parameters().contains("embed_tokens.weight"));  // tied LM head
  CHECK(middle->named_parameters().contains("blocks.2.mixer.q_proj.weight"));
  torch::manual_seed(1);
  auto tokens = torch::randint(c.vocab, {2, 70}, torch::kLong);
  auto expected = whole->forward(tokens);
  auto x = first->forward_blocks(first->embed(tokens));
  x = middle->block(0)->forward(x);
  auto logits = last->head(last->forward_blocks(x));
  CHECK(torch::equal(logits, expected));
  // parameter counts per layer follow the accounting's layer index convention
  auto counts = count_parameters(c);
  int64_t middle_numel = 0;
  for (const auto& p : middle->parameters()) middle_numel += p.numel();
  CHECK(middle_numel == counts.per_layer_total[3]);
}

TEST_CASE("model: a part outside the pattern is a user error", "[model]") {
  auto c = preset("tiny");
  CHECK_THROWS_AS(HybridLM(c, 1, 2, 9, false, true), hlp::UserError);
  CHECK_THROWS_AS(HybridLM(c, 1, 3, 2, false, false), hlp::UserError);
  HybridLM middle(c, 1, 1, 3, false, false);
  CHECK_THROWS(middle->forward(torch::zeros({1, 4}, torch::kLong)));  // not the whole model
}

TEST_CASE("model: deferred values hold no bytes until materialised, then equal drawn ones",
          "[model]") {
  for (const bool tied : {true, false}) {
    auto c = preset("tiny").with_pattern("GAS");
    c.gdn_variant = GdnVariant::jetblock;
    c.tied_embeddings = tied;
    const auto lora = make_lora_config(2, 4, 0, "q_proj,o_proj,down_proj,w2");
    torch::manual_seed(17);
    HybridLM drawn(c, 5);
    apply_lora(drawn, lora);
    const auto rng_after_drawn = torch::rand({4});  // the global generator's next draws
    torch::manual_seed(17);
    HybridLM deferred(c, 5, Values::deferred);
    apply_lora(deferred, lora);
    const auto rng_after_deferred = torch::rand({4});
    auto want = drawn->named_parameters();
    auto got = deferred->named_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string& name = got[i].key();
      INFO(name);
      CHECK(name == want[i].key());
      CHECK(got[i].value().sizes() == want[i].value().sizes());
      CHECK(got[i].value().requires_grad() == want[i].value().requires_grad());
      const bool adapter = name.find(".lora_") != std::string::npos;
      CHECK(has_values(got[i].value()) == adapter);  // only apply_lora's factors are drawn
      if (!adapter) CHECK(got[i].value().storage().nbytes() == 0);
      materialise_parameter(name, got[i].value(), 5);
      CHECK(torch::equal(got[i].value(), want[i].value()));
    }
    // the global generator (LoRA dropout masks) is where the drawn model leaves it
    CHECK(torch::equal(rng_after_drawn, rng_after_deferred));
    auto tokens = torch::randint(c.vocab, {2, 9}, torch::kLong);
    CHECK(torch::equal(deferred->forward(tokens), drawn->forward(tokens)));
  }
}

TEST_CASE("model: whole model runs in float64 and both GDN modes agree", "[model][gdn]") {
  auto c = preset("small").with_pattern("GGA").with_vocab(50);  // JetBlock G layers
  c.gdn_chunk = 8;
  HybridLM model(c, 3);
  model->to(torch::kFloat64);
  torch::manual_seed(2);
  auto tokens = torch::randint(c.vocab, {2, 21}, torch::kLong);
  auto chunked = model->forward(tokens);
  CHECK(chunked.scalar_type() == torch::kFloat64);
  CHECK(chunked.sizes() == torch::IntArrayRef({2, 21, c.vocab}));
  model->set_gdn_mode(GdnMode::recurrent);
  CHECK(hlp::model::testing::relative_error(model->forward(tokens), chunked) < 1e-10);
}

TEST_CASE("model: tiny model: loss falls on the sample corpus (byte tokens)", "[model][train]") {
  at::set_num_threads(1);
  const char* source_dir = std::getenv("HLP_SOURCE_DIR");
  REQUIRE(source_dir != nullptr);
  std::ifstream file(std::string(source_dir) + "/datasets/sample/corpus.txt", std::ios::binary);
  REQUIRE(file.good());
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(file)),
                                   std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 100000);
  // byte value = token id (the model does not depend on the data library)
  auto corpus = torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8)
                    .to(torch::kLong);

  auto c = preset("tiny");  // vocab 258 covers 256 byte values
  HybridLM model(c, 1234);
  apply_lora(model, LoraConfig::none());  // full finetune: learning from scratch
  torch::optim::AdamW optimizer(trainable_parameters(*model),
                                torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  const int64_t B = 8, T = 64, steps = 150;
  auto gen = at::detail::createCPUGenerator(7);
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    auto starts = torch::randint(corpus.size(0) - T - 1, {B}, gen, torch::kLong);
    auto offsets = starts.unsqueeze(1) + torch::arange(T + 1, torch::kLong).unsqueeze(0);
    auto window = corpus.index_select(0, offsets.reshape(-1)).reshape({B, T + 1});
    auto inputs = window.narrow(1, 0, T), targets = window.narrow(1, 1, T);
    optimizer.zero_grad();
    auto loss = hlp::model::cross_entropy_loss(model->forward(inputs), targets);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  double last20 = 0;
  for (int64_t i = steps - 20; i < steps; ++i) last20 += losses[i] / 20.0;
  INFO("first loss " << losses[0] << ", mean of last 20 " << last20);
  CHECK(std::abs(losses[0] - std::log(double(c.vocab))) < 0.5);  // starts near ln V
  CHECK(last20 < 0.75 * losses[0]);
}
