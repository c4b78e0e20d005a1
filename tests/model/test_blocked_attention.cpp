// The blocked (flash-style) attention kernel equals the naive reference: outputs and every
// input gradient in float64, on the shapes where tiling goes wrong (ragged last block, T below
// one block, windows of 1 and >= T, GQA groups, strided inputs); bf16 within a stated
// tolerance; a whole model trains the same 5 steps with either kernel. Also the tiling count
// the FLOP accounting uses, and the sdpa / auto choice on this build.
#include "catch_compat.h"
#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/torch.h>

#include "common/error.h"
#include "model/accounting.h"
#include "model/attention.h"
#include "model/autocast_state.h"
#include "model/attention_tiling.h"
#include "model/blocked_attention.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "model/sdpa_attention.h"
#include "test_helpers.h"

using namespace hlp::model;
using hlp::model::testing::relative_error;

namespace {

struct Case {
  int64_t batch, heads, kv_heads, seq_len, head_dim, window, block;
};

struct Inputs {
  torch::Tensor q, k, v;  // leaves that require grad
};

Inputs random_inputs(const Case& c, torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto opts = torch::TensorOptions().dtype(dtype);
  return {torch::randn({c.batch, c.heads, c.seq_len, c.head_dim}, opts).requires_grad_(),
          torch::randn({c.batch, c.kv_heads, c.seq_len, c.head_dim}, opts).requires_grad_(),
          torch::randn({c.batch, c.kv_heads, c.seq_len, c.head_dim}, opts).requires_grad_()};
}

// Output and the gradients of sum(out * w) for q, k, v.
struct Result {
  torch::Tensor out, dq, dk, dv;
};

template <typename Kernel>
Result run(const Inputs& in, const torch::Tensor& weight, Kernel kernel) {
  for (auto t : {in.q, in.k, in.v})
    if (t.grad().defined()) t.grad().zero_();
  auto out = kernel(in.q, in.k, in.v);
  (out * weight).sum().backward();
  return {out.detach(), in.q.grad().clone(), in.k.grad().clone(), in.v.grad().clone()};
}

// max |a - b| / max(max |b|, 1): relative for the O(1) tensors of random inputs, absolute where
// the exact value is 0 (window 1: softmax over one key, so dq = dk = 0 up to rounding).
double error(const torch::Tensor& got, const torch::Tensor& want) {
  const double diff = (got - want).abs().max().item<double>();
  return diff / std::max(want.abs().max().item<double>(), 1.0);
}

void check_equal(const Result& got, const Result& want, double tolerance) {
  CHECK(error(got.out, want.out) < tolerance);
  CHECK(error(got.dq, want.dq) < tolerance);
  CHECK(error(got.dk, want.dk) < tolerance);
  CHECK(error(got.dv, want.dv) < tolerance);
}

}  // namespace

TEST_CASE("model: blocked attention equals naive in float64 (outputs and input gradients)",
          "[model][attention][blocked]") {
  // B, H, KVH, T, hd, window, block
  const std::vector<std::pair<const char*, Case>> cases = {
      {"T not a multiple of the block", {2, 4, 2, 37, 8, 0, 16}},
      {"T below one block", {1, 4, 2, 10, 8, 0, 16}},
      {"T one block exactly", {1, 2, 1, 16, 8, 0, 16}},
      {"window >= T", {1, 4, 2, 40, 8, 64, 16}},
      {"window = T", {1, 4, 2, 40, 8, 40, 16}},
      {"window = 1", {2, 4, 2, 37, 8, 1, 16}},
      {"window inside one block", {1, 4, 2, 70, 8, 5, 16}},
      {"window across blocks, ragged", {1, 4, 2, 70, 8, 20, 16}},
      {"window a block multiple", {1, 4, 2, 64, 8, 32, 16}},
      {"GQA ratio 1", {1, 6, 6, 45, 8, 0, 16}},
      {"GQA ratio 2", {1, 6, 3, 45, 8, 0, 16}},
      {"GQA ratio 6", {1, 6, 1, 45, 8, 0, 16}},
      {"GQA ratio 6, window", {1, 6, 1, 45, 8, 12, 16}},
      {"default block", {1, 4, 2, 300, 16, 0, kAttentionBlock}},
      {"default block, window", {1, 4, 2, 300, 16, 100, kAttentionBlock}},
  };
  for (const auto& [name, c] : cases) {
    INFO(name << ": B " << c.batch << " H " << c.heads << " KVH " << c.kv_heads << " T "
              << c.seq_len << " window " << c.window << " block " << c.block);
    const auto in = random_inputs(c, torch::kFloat64, 11);
    const auto weight = torch::randn({c.batch, c.heads, c.seq_len, c.head_dim}, torch::kFloat64);
    const auto want = run(in, weight, [&](auto q, auto k, auto v) {
      return naive_attention(q, k, v, c.window);
    });
    const auto got = run(in, weight, [&](auto q, auto k, auto v) {
      return blocked_attention(q, k, v, c.window, c.block);
    });
    check_equal(got, want, 1e-10);
  }
}

TEST_CASE("model: blocked attention takes non-contiguous inputs", "[model][attention][blocked]") {
  const int64_t B = 2, H = 6, KVH = 2, T = 50, hd = 8;
  torch::manual_seed(12);
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // q as the projections give it: [B, T, H, hd] transposed to [B, H, T, hd]; k and v as
  // every other position of a longer sequence, and hd strided inside a wider buffer.
  auto q_storage = torch::randn({B, T, H, hd}, f64).requires_grad_();
  auto k_storage = torch::randn({B, KVH, 2 * T, hd}, f64).requires_grad_();
  auto v_storage = torch::randn({B, KVH, T, 2 * hd}, f64).requires_grad_();
  auto views = [&] {
    return std::make_tuple(q_storage.transpose(1, 2), k_storage.slice(2, 0, 2 * T, 2),
                           v_storage.slice(3, 0, 2 * hd, 2));
  };
  {
    auto [q, k, v] = views();
    REQUIRE_FALSE(q.is_contiguous());
    REQUIRE_FALSE(k.is_contiguous());
    REQUIRE_FALSE(v.is_contiguous());
  }
  const auto weight = torch::randn({B, H, T, hd}, f64);
  auto grads = [&](bool blocked) {
    for (auto t : {q_storage, k_storage, v_storage})
      if (t.grad().defined()) t.grad().zero_();
    auto [q, k, v] = views();
    auto out = blocked ? blocked_attention(q, k, v, 9, 16) : naive_attention(q, k, v, 9);
    (out * weight).sum().backward();
    return Result{out.detach(), q_storage.grad().clone(), k_storage.grad().clone(),
                  v_storage.grad().clone()};
  };
  check_equal(grads(true), grads(false), 1e-10);
}

TEST_CASE("model: blocked attention in bf16 is within 2e-2 of float64, like naive",
          "[model][attention][blocked]") {
  // bf16 has an 8-bit mantissa (relative step 2^-8 = 3.9e-3). The blocked kernel computes in
  // fp32 inside, so its error is the bf16 rounding of inputs and outputs: we require at most
  // 2e-2 relative (max-norm) on the output and every gradient, and no worse than 1.5x the
  // naive kernel's own bf16 error (+ one bf16 step).
  const Case c{1, 4, 2, 200, 16, 0, 64};
  for (int64_t window : {int64_t(0), int64_t(48)}) {
    INFO("window " << window);
    const auto exact_in = random_inputs(c, torch::kFloat64, 13);
    const auto weight = torch::randn({c.batch, c.heads, c.seq_len, c.head_dim}, torch::kFloat64);
    const auto exact = run(exact_in, weight, [&](auto q, auto k, auto v) {
      return naive_attention(q, k, v, window);
    });
    Inputs bf16_in{exact_in.q.detach().to(torch::kBFloat16).requires_grad_(),
                   exact_in.k.detach().to(torch::kBFloat16).requires_grad_(),
                   exact_in.v.detach().to(torch::kBFloat16).requires_grad_()};
    const auto weight_bf16 = weight.to(torch::kBFloat16);
    const auto blocked = run(bf16_in, weight_bf16, [&](auto q, auto k, auto v) {
      return blocked_attention(q, k, v, window, c.block);
    });
    const auto naive = run(bf16_in, weight_bf16, [&](auto q, auto k, auto v) {
      return naive_attention(q, k, v, window);
    });
    CHECK(blocked.out.scalar_type() == torch::kBFloat16);
    CHECK(blocked.dq.scalar_type() == torch::kBFloat16);
    const std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs = {
        {blocked.out, naive.out}, {blocked.dq, naive.dq}, {blocked.dk, naive.dk},
        {blocked.dv, naive.dv}};
    const std::vector<torch::Tensor> exact_values = {exact.out, exact.dq, exact.dk, exact.dv};
    for (size_t i = 0; i < pairs.size(); ++i) {
      const double blocked_error = relative_error(pairs[i].first.to(torch::kFloat64), exact_values[i]);
      const double naive_error = relative_error(pairs[i].second.to(torch::kFloat64), exact_values[i]);
      INFO("tensor " << i << " (out, dq, dk, dv): blocked " << blocked_error << ", naive "
                     << naive_error);
      CHECK(blocked_error < 2e-2);
      CHECK(blocked_error <= 1.5 * naive_error + 3.9e-3);
    }
  }
}

TEST_CASE("model: whole model trains 5 steps the same with blocked and naive attention (fp32)",
          "[model][attention][blocked][train]") {
  // T = 300 spans three 128-position blocks; window 16 makes the S layer banded.
  auto c = preset("tiny");  // GAGS
  const int64_t B = 2, T = 300, steps = 5;
  torch::manual_seed(21);
  const auto tokens = torch::randint(c.vocab, {B, T + 1}, torch::kLong);
  const auto inputs = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);
  // Losses of 5 AdamW steps, and every parameter's gradient at the first step (same weights).
  auto train = [&](AttnImpl impl) {
    HybridLM model(c, 77);
    model->set_attn_impl(impl);
    apply_lora(model, LoraConfig::none());
    torch::optim::AdamW optimizer(trainable_parameters(*model),
                                  torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
    std::vector<double> losses;
    torch::Tensor first_gradients;  // all parameters' gradients, flattened
    for (int64_t step = 0; step < steps; ++step) {
      optimizer.zero_grad();
      auto loss = hlp::model::cross_entropy_loss(model->forward(inputs), targets);
      loss.backward();
      if (step == 0) {
        std::vector<torch::Tensor> flat;
        for (const auto& p : model->parameters()) flat.push_back(p.grad().reshape(-1));
        first_gradients = torch::cat(flat);
      }
      optimizer.step();
      losses.push_back(loss.item<double>());
    }
    return std::make_pair(losses, first_gradients);
  };
  const auto [naive_losses, naive_grads] = train(AttnImpl::naive);
  const auto [blocked_losses, blocked_grads] = train(AttnImpl::blocked);
  for (int64_t s = 0; s < steps; ++s) {
    INFO("step " << s << ": naive " << naive_losses[s] << ", blocked " << blocked_losses[s]);
    CHECK(std::abs(blocked_losses[s] - naive_losses[s]) <= 1e-6 * std::abs(naive_losses[s]));
  }
  // Gradients relative to the largest entry of all of them: single entries near zero (e.g. the
  // k bias, to which softmax is almost invariant) carry only rounding noise of either kernel.
  CHECK(relative_error(blocked_grads, naive_grads) < 1e-5);
}

TEST_CASE("model: tiling: full causal skips the upper triangle, a window visits only its band",
          "[model][attention][accounting]") {
  // T a multiple of the block: the diagonal tiles are whole, the rest below them.
  const int64_t T = 1024, b = 128, n = T / b;
  CHECK(visited_score_entries(T, 0, b) == n * (n + 1) / 2 * b * b);
  CHECK(visited_score_entries(T, T, b) == visited_score_entries(T, 0, b));
  // window 256 = 2 blocks: each query block visits its own, the 2 before (one partly)
  CHECK(visited_score_entries(8192, 256, b) <= 8192 * (256 + 2 * b));
  CHECK(visited_score_entries(16384, 256, b) == 2 * visited_score_entries(8192, 256, b) + 3 * b * b);
  CHECK(visited_score_entries(10, 0, b) == 100);  // one ragged tile
  // tile classification: mask only where some pair is hidden
  CHECK(tile_fully_visible({128, 256}, {0, 128}, 0));
  CHECK_FALSE(tile_fully_visible({128, 256}, {128, 256}, 0));     // the diagonal
  CHECK_FALSE(tile_fully_visible({256, 384}, {0, 128}, 256));      // window edge
  CHECK(tile_fully_visible({256, 384}, {128, 256}, 256));
}

TEST_CASE("model: executed attention FLOPs count the blocked kernel's tiles",
          "[model][attention][accounting]") {
  auto c = preset("small");  // GGGGGGAGGASG: A at 6, S (window 256) at 10
  const int64_t T = 8192;
  const double hh = 4.0 * 64;  // H * hd
  c.attn_impl = AttnImpl::naive;
  auto naive_a = mixing_executed_flops_per_token(c, 6, T);
  CHECK(naive_a.total() == Approx(mixing_training_flops_per_token(c, 6, T)));
  CHECK(mixing_executed_flops_per_token(c, 10, T).total() == Approx(12.0 * hh * T));
  c.attn_impl = AttnImpl::blocked;
  auto blocked_a = mixing_executed_flops_per_token(c, 6, T);
  const double entries_a = double(visited_score_entries(T, 0));
  CHECK(blocked_a.forward == Approx(4.0 * hh * entries_a / T));
  CHECK(blocked_a.backward == Approx(10.0 * hh * entries_a / T));
  CHECK(blocked_a.total() < 0.6 * naive_a.total());  // ~14/24 of the T^2 work
  auto blocked_s = mixing_executed_flops_per_token(c, 10, T);
  CHECK(blocked_s.total() == Approx(14.0 * hh * visited_score_entries(T, 256) / T));
  // model FLOPs of the S layer use the window, whatever the kernel
  CHECK(mixing_training_flops_per_token(c, 10, T) == Approx(12.0 * hh * 256));
  // G layers are not attention: same under both kernels
  CHECK(mixing_executed_flops_per_token(c, 0, T).total() ==
        Approx(mixing_training_flops_per_token(c, 0, T)));
  // the attention kernel's memory: naive quadratic, blocked linear in T
  c.attn_impl = AttnImpl::naive;
  CHECK(attention_memory(c, 6, T, 1).saved_bytes >= 4 * T * T * 4);
  c.attn_impl = AttnImpl::blocked;
  const auto m8 = attention_memory(c, 6, T, 1), m16 = attention_memory(c, 6, 2 * T, 1);
  CHECK(m16.saved_bytes == 2 * m8.saved_bytes);
  CHECK(m8.saved_bytes < 64 * T * 64);
}

TEST_CASE("model: --attn-impl: auto is blocked on the CPU, sdpa runs with LibTorch 2, else a clear user error",
          "[model][attention][config]") {
  CHECK(parse_attn_impl("auto") == AttnImpl::automatic);
  CHECK(to_string(parse_attn_impl("blocked")) == "blocked");
  CHECK_THROWS_AS(parse_attn_impl("flash"), hlp::UserError);
  CHECK(resolve_attn_impl(AttnImpl::automatic, torch::kCPU) == AttnImpl::blocked);
  CHECK(resolve_attn_impl(AttnImpl::naive, torch::kCPU) == AttnImpl::naive);
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x: sdpa on the CPU is LibTorch's own kernel (parity: model.sdpa_cpu_parity)
  CHECK(sdpa_available(torch::kCPU));
  CHECK(resolve_attn_impl(AttnImpl::sdpa, torch::kCPU) == AttnImpl::sdpa);
  auto c2 = preset("tiny");
  c2.attn_impl = AttnImpl::sdpa;
  HybridLM sdpa_model(c2, 1);
  CHECK(sdpa_model->forward(torch::zeros({1, 4}, torch::kLong)).size(1) == 4);
#else
  CHECK_FALSE(sdpa_available(torch::kCPU));
  CHECK_THROWS_WITH(resolve_attn_impl(AttnImpl::sdpa, torch::kCPU),
                    Catch::Contains("--attn-impl sdpa cannot run") &&
                        Catch::Contains("use --attn-impl auto, blocked or naive"));
  // a model asked for sdpa fails at its first forward with the same message
  auto c = preset("tiny");
  c.attn_impl = AttnImpl::sdpa;
  HybridLM model(c, 1);
  CHECK_THROWS_AS(model->forward(torch::zeros({1, 4}, torch::kLong)), hlp::UserError);
#endif
}

TEST_CASE("model: blocked attention ignores autocast: its float32 tiles stay float32",
          "[model][attention][precision]") {
  // Under bf16 autocast (the strategies' forward), bf16 q/k/v over several tiles (T = 300,
  // block 128): the kernel upcasts them and must compute every tile in float32, exactly as
  // without autocast. Without NoAutocastGuard LibTorch 2.x threw ("Bad in-place call") and 1.13
  // summed in bf16.
  torch::manual_seed(5);
  auto bf = torch::TensorOptions().dtype(torch::kBFloat16);
  auto q = torch::randn({1, 4, 300, 16}, bf), k = torch::randn({1, 2, 300, 16}, bf),
       v = torch::randn({1, 2, 300, 16}, bf);
  for (int64_t window : {int64_t{0}, int64_t{64}}) {
    const auto plain = blocked_attention(q, k, v, window, 128);
    hlp::model::set_autocast(at::kCPU, true, at::kBFloat16);
    torch::Tensor under_autocast;
    try {
      under_autocast = blocked_attention(q, k, v, window, 128);
    } catch (...) {
      hlp::model::set_autocast(at::kCPU, false, at::kBFloat16);
      throw;
    }
    hlp::model::set_autocast(at::kCPU, false, at::kBFloat16);
    at::autocast::clear_cache();
    INFO("window " << window);
    CHECK(under_autocast.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(under_autocast, plain));
  }
}
