// Sliding-window attention: window >= T is full attention; with a small window a token's output
// ignores tokens outside its window (and does depend on tokens inside it).
#include "catch_compat.h"
#include <torch/torch.h>

#include "model/attention.h"
#include "model/block.h"
#include "model/hybrid_lm.h"
#include "model/init.h"
#include "test_helpers.h"

using namespace hlp::model;

namespace {

// An attention layer with deterministic non-trivial weights, in float64.
CausalSelfAttention make_attention(const ModelConfig& c, int64_t window) {
  CausalSelfAttention attn(c, window);
  for (auto& item : attn->named_parameters()) {
    torch::NoGradGuard no_grad;
    init_parameter("attn." + item.key(), item.value(), 5);
    if (item.key().find("bias") != std::string::npos) item.value().normal_(0, 0.1);
  }
  attn->to(torch::kFloat64);
  return attn;
}

}  // namespace

TEST_CASE("model: mask: query i sees keys j with i - window < j <= i", "[model][attention]") {
  auto mask = causal_window_mask(6, 3, torch::kCPU);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j) CHECK(mask[i][j].item<bool>() == (i - 3 < j && j <= i));
  auto full = causal_window_mask(6, 0, torch::kCPU);
  CHECK(torch::equal(full, torch::ones({6, 6}, torch::kBool).tril()));
}

TEST_CASE("model: sliding window >= T equals full causal attention", "[model][attention]") {
  auto c = preset("tiny");
  auto attn = make_attention(c, /*window=*/20);
  torch::manual_seed(3);
  auto x = torch::randn({2, 20, c.hidden}, torch::kFloat64);
  auto windowed = attn->forward(x);
  attn->window = 0;  // full attention, same weights
  auto full = attn->forward(x);
  CHECK(torch::allclose(windowed, full, 0, 1e-14));
  attn->window = 100;
  CHECK(torch::allclose(attn->forward(x), full, 0, 1e-14));
  attn->window = 5;  // a small window really changes something (the check above is not vacuous)
  CHECK_FALSE(torch::allclose(attn->forward(x), full, 0, 1e-6));
}

TEST_CASE("model: small window: changing a token outside the window leaves the output unchanged",
          "[model][attention]") {
  auto c = preset("tiny");
  const int64_t window = 4, T = 16, i = 12;
  auto attn = make_attention(c, window);
  torch::manual_seed(4);
  auto x = torch::randn({1, T, c.hidden}, torch::kFloat64);
  auto y = attn->forward(x);
  for (int64_t j : {0, 5, 8}) {  // j <= i - window: outside the window of query i
    auto x2 = x.clone();
    x2[0][j] += torch::randn({c.hidden}, torch::kFloat64);
    auto y2 = attn->forward(x2);
    INFO("changed token " << j);
    CHECK(torch::allclose(y2[0][i], y[0][i], 0, 1e-14));
    CHECK_FALSE(torch::allclose(y2[0][j], y[0][j], 0, 1e-6));  // the change itself is visible
  }
  for (int64_t j : {9, 11, 12}) {  // inside the window: the output must move
    auto x2 = x.clone();
    x2[0][j] += torch::randn({c.hidden}, torch::kFloat64);
    INFO("changed token " << j);
    CHECK_FALSE(torch::allclose(attn->forward(x2)[0][i], y[0][i], 0, 1e-6));
  }
}

TEST_CASE("model: small window holds for a whole S block too", "[model][attention]") {
  auto c = preset("tiny").with_pattern("S");
  c.window = 3;
  HybridLM model(c, 9);
  model->to(torch::kFloat64);
  auto block = model->block(0);
  torch::manual_seed(5);
  auto x = torch::randn({1, 10, c.hidden}, torch::kFloat64);
  auto y = block->forward(x);
  auto x2 = x.clone();
  x2[0][4] += 1.0;  // query 7 sees 5, 6, 7 only
  auto y2 = block->forward(x2);
  CHECK(torch::allclose(y2[0][7], y[0][7], 0, 1e-14));
  CHECK_FALSE(torch::allclose(y2[0][6], y[0][6], 0, 1e-6));
}

TEST_CASE("model: GQA: kv heads shared by groups of query heads give a causal layer", "[model][attention]") {
  auto c = preset("tiny");  // 4 query heads, 2 KV heads
  auto attn = make_attention(c, 0);
  torch::manual_seed(6);
  auto x = torch::randn({1, 8, c.hidden}, torch::kFloat64);
  auto y = attn->forward(x);
  auto x2 = x.clone();
  x2[0][7] += 1.0;  // the future never leaks into the past
  CHECK(torch::allclose(attn->forward(x2).narrow(1, 0, 7), y.narrow(1, 0, 7), 0, 1e-14));
}
