// The zero-bubble B / W split (parallel/split_backward.h) gives bit-identical gradients to the
// fused backward: every trainable parameter's gradient and the chunk input's gradient compare
// with torch::equal, in float64 and in float32, for a first, a middle and a last pipeline chunk
// of a model with G (JetBlock, dynamic conv), A and S layers, with LoRA (dropout on, the same
// masks) and with full finetuning, over two micro-batches whose W run after both B.
#include "catch_compat.h"

#include <map>

#include "common/error.h"
#include "model/config.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "parallel/split_backward.h"

using namespace hlp;

namespace {

struct Chunk {
  int64_t first, end;
  bool embedding, head;
};

// Gradients after two micro-batches' backward, fused (B and W at once) or split (B0 B1 W0 W1).
std::map<std::string, torch::Tensor> gradients(const Chunk& part, const model::LoraConfig& lora,
                                               at::ScalarType dtype, bool split, bool tied) {
  auto c = model::preset("tiny").with_pattern("GASGAS");
  c.gdn_variant = model::GdnVariant::jetblock;
  c.gdn_dconv_reduction = 2;
  c.gdn_chunk = 8;
  c.tied_embeddings = tied;
  model::HybridLM chunk(c, 5, part.first, part.end, part.embedding, part.head);
  chunk->to(dtype);
  model::apply_lora(chunk, lora);
  {
    // zero-initialised weights (LoRA's B, the dynamic convolution's kernel generator output)
    // made non-zero, so that gradients reach what lies before them
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    for (auto& p : chunk->parameters())
      if (p.abs().sum().item<double>() == 0) p.normal_(0, 0.1);
  }
  chunk->train();
  std::vector<torch::Tensor> params;
  for (auto& p : chunk->parameters())
    if (p.requires_grad()) params.push_back(p);
  std::map<std::string, torch::Tensor> out;
  parallel::SplitBackward splits[2];
  for (int m = 0; m < 2; ++m) {
    torch::manual_seed(100 + m);
    auto tokens = torch::randint(c.vocab, {2, 24}, torch::kLong);
    torch::Tensor input, x;
    if (part.embedding) {
      x = chunk->embed(tokens);
    } else {
      input = torch::randn({2, 24, c.hidden}, torch::TensorOptions().dtype(dtype)).requires_grad_();
      x = input;
    }
    torch::manual_seed(200 + m);  // dropout masks
    x = chunk->forward_blocks(x);
    torch::Tensor root, seed;
    if (part.head) {
      root = model::cross_entropy_loss(chunk->head(x), tokens) / 2.0;
      seed = torch::ones_like(root);
    } else {
      root = x;
      torch::manual_seed(300 + m);
      seed = torch::randn_like(x);
    }
    if (split) {
      auto g = splits[m].backward_input(root, seed, input, params);
      if (input.defined()) out["input." + std::to_string(m)] = g;
    } else {
      root.backward(seed);
      if (input.defined()) out["input." + std::to_string(m)] = input.grad();
    }
  }
  if (split)
    for (auto& s : splits) {
      CHECK(s.pending());
      s.backward_weight();
      CHECK(!s.pending());
    }
  for (const auto& item : chunk->named_parameters())
    if (item.value().requires_grad()) {
      REQUIRE(item.value().grad().defined());
      out[item.key()] = item.value().grad();
    }
  return out;
}

void check_identical(const Chunk& part, const model::LoraConfig& lora, at::ScalarType dtype,
                     bool tied = false) {
  auto fused = gradients(part, lora, dtype, false, tied);
  auto split = gradients(part, lora, dtype, true, tied);
  REQUIRE(fused.size() > 2);
  REQUIRE(split.size() == fused.size());
  for (const auto& [name, g] : fused) {
    INFO(name);
    REQUIRE(split.count(name) == 1);
    CHECK(g.abs().sum().item<double>() > 0);  // a gradient that is all zeros proves nothing
    CHECK(torch::equal(split[name], g));
  }
}

const std::vector<Chunk> kChunks{{0, 2, true, false}, {2, 4, false, false}, {4, 6, false, true}};

}  // namespace

TEST_CASE("split backward: B then W gives the fused gradients bit for bit (LoRA, float64)",
          "[parallel][zb]") {
  for (const auto& part : kChunks) {
    INFO("blocks " << part.first << ".." << part.end);
    check_identical(part, model::make_lora_config(4, 8, 0.2, "all-linear"), torch::kFloat64);
  }
}

TEST_CASE("split backward: B then W gives the fused gradients bit for bit (full finetune)",
          "[parallel][zb]") {
  for (auto dtype : {torch::kFloat64, torch::kFloat32})
    for (const auto& part : kChunks) {
      INFO("blocks " << part.first << ".." << part.end << " dtype " << dtype);
      check_identical(part, model::LoraConfig::none(), dtype);
    }
}

TEST_CASE("split backward: tied embeddings, as pipeline chunks hold them (full finetune)",
          "[parallel][zb]") {
  // the first chunk embeds with the matrix, the last multiplies by its transpose (its copy)
  for (const auto& part : {kChunks.front(), kChunks.back()}) {
    INFO("blocks " << part.first << ".." << part.end);
    check_identical(part, model::LoraConfig::none(), torch::kFloat64, /*tied=*/true);
  }
}

TEST_CASE("split backward: LoRA in float32 too", "[parallel][zb]") {
  for (const auto& part : kChunks) {
    INFO("blocks " << part.first << ".." << part.end);
    check_identical(part, model::make_lora_config(4, 8, 0.0, "q_proj,v_proj,o_proj,down_proj"),
                    torch::kFloat32);
  }
}

TEST_CASE("split backward: a parameter used twice in one chunk is refused", "[parallel][zb]") {
  auto w = torch::randn({4, 4}, torch::kFloat64).requires_grad_();
  auto x = torch::randn({3, 4}, torch::kFloat64).requires_grad_();
  auto y = torch::matmul(torch::matmul(x, w), w);
  parallel::SplitBackward s;
  CHECK_THROWS_AS(s.backward_input(y, torch::ones_like(y), x, {w}), UserError);
}
