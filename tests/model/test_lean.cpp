// Parity of every lean operation (src/model/kernels/lean_ops.h) with the op-by-op reference,
// float64, outputs and every input gradient within 1e-10 (relative to the largest reference
// entry): B > 1, non-contiguous inputs, T not a multiple of the chunk, non-zero initial state.
// And the chunked linear + cross entropy (src/model/chunked_loss.h) against the full logits:
// float64 within 1e-12, float32 within 1e-6, frozen and trainable head, ignored targets.
#include "catch_compat.h"
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "model/chunked_loss.h"
#include "model/gated_deltanet.h"
#include "model/gdn_core.h"
#include "model/hybrid_lm.h"
#include "model/kernels/lean_ops.h"
#include "model/autocast_state.h"
#include "model/layers.h"
#include "model/lora.h"
#include "parity_helpers.h"
#include "test_helpers.h"

using namespace hlp::model;
using namespace hlp::model::testing::parity;
using hlp::model::testing::relative_error;

namespace {

using Fn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

void lean_matches(const Fn& lean_fn, const Fn& ref_fn, const std::vector<torch::Tensor>& inputs) {
  check_parity(outputs_and_grads(lean_fn, inputs), outputs_and_grads(ref_fn, inputs));
}

}  // namespace

TEST_CASE("lean: RMSNorm module lean = reference (float64, non-contiguous, weight grad)",
          "[model][lean]") {
  torch::manual_seed(1);
  RMSNorm norm(37, 1e-6);
  norm->to(torch::kFloat64);
  const auto w = torch::rand({37}, kF64) + 0.5;
  auto with = [&](Kernels k) -> Fn {
    return [&, k](const std::vector<torch::Tensor>& in) {
      norm->weight = in[1];
      norm->kernels = k;
      return std::vector<torch::Tensor>{norm->forward(in[0])};
    };
  };
  lean_matches(with(Kernels::lean), with(Kernels::reference), {noncontiguous(3, 11, 37), w});
}

TEST_CASE("lean: gated RMSNorm, SwiGLU, L2 normalisation and the gates = reference",
          "[model][lean]") {
  torch::manual_seed(2);
  const auto x = noncontiguous(2, 9, 24), gate = noncontiguous(2, 9, 24);
  const auto w = torch::rand({24}, kF64) + 0.5;
  lean_matches(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{lean::gated_rms_norm(in[0], in[1], in[2], 1e-6)};
      },
      [](const std::vector<torch::Tensor>& in) {
        auto r = torch::rsqrt(in[0].pow(2).mean(-1, true) + 1e-6);
        return std::vector<torch::Tensor>{in[0] * r * in[1] * torch::silu(in[2])};
      },
      {x, w, gate});
  lean_matches(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{lean::swiglu(in[0], in[1])};
      },
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{torch::silu(in[0]) * in[1]};
      },
      {x * 3, gate});
  const int64_t d = 6;
  for (bool silu : {true, false})
    for (double divisor : {1.0, std::sqrt(double(d))}) {
      INFO("silu " << silu << " divisor " << divisor);
      lean_matches(
          [&](const std::vector<torch::Tensor>& in) {
            return std::vector<torch::Tensor>{lean::l2_normalize(in[0], d, divisor, silu)};
          },
          [&](const std::vector<torch::Tensor>& in) {
            auto n = (silu ? torch::silu(in[0]) : in[0]).view({2, 9, 4, d});
            return std::vector<torch::Tensor>{n * torch::rsqrt(n.pow(2).sum(-1, true) + 1e-6) / divisor};
          },
          {x});
    }
  const auto A_log = torch::rand({3}, kF64) * 2, dt_bias = torch::tensor({-1.0, 0.5, 15.0}, kF64);
  lean_matches(
      [](const std::vector<torch::Tensor>& in) {
        auto [beta, g] = lean::gdn_gates(in[0], in[1], in[2], in[3]);
        return std::vector<torch::Tensor>{beta, g};
      },
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{torch::sigmoid(in[1]),
                                          -in[2].exp() * torch::softplus(in[0] + in[3])};
      },
      {noncontiguous(2, 9, 3) * 8, noncontiguous(2, 9, 3), A_log, dt_bias});
}

TEST_CASE("lean: JetBlock dynamic convolution and the causal short convolution = reference",
          "[model][lean]") {
  torch::manual_seed(4);
  const int64_t B = 2, T = 10, C = 12, W = 4;
  DynamicShortConv dyn(/*generator_in=*/8, C, W, /*reduction=*/2);
  ShortConv conv(C, W);
  dyn->to(torch::kFloat64);
  conv->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : dyn->parameters()) p.normal_(0, 0.4);
    conv->weight.normal_(0, 0.4);
  }
  auto dynamic = [&](Kernels k) -> Fn {
    return [&, k](const std::vector<torch::Tensor>& in) {
      dyn->kernels = k;
      return std::vector<torch::Tensor>{dyn->forward(in[0], in[1])};
    };
  };
  lean_matches(dynamic(Kernels::lean), dynamic(Kernels::reference),
               {noncontiguous(B, T, C), noncontiguous(B, T, 8)});
  auto short_conv = [&](Kernels k) -> Fn {
    return [&, k](const std::vector<torch::Tensor>& in) {
      conv->kernels = k;
      conv->weight = in[1];
      return std::vector<torch::Tensor>{conv->forward(in[0])};
    };
  };
  const auto weight = torch::randn({C, 1, W}, kF64) * 0.4;
  lean_matches(short_conv(Kernels::lean), short_conv(Kernels::reference),
               {noncontiguous(B, T, C), weight});
}

TEST_CASE("lean: gated delta rule chunked = reference chunked and recurrent (saved and "
          "recomputed states, non-zero initial state, final-state gradient)",
          "[model][lean][gdn]") {
  const GdnInputs gdn = gdn_parity_inputs();
  const int64_t chunk = gdn.chunk;
  const torch::Tensor &q = gdn.q, &k = gdn.k, &v = gdn.v, &beta = gdn.beta, &g = gdn.g, &S0 = gdn.S0;
  auto as_fn = [](auto core) -> Fn {
    return [core](const std::vector<torch::Tensor>& in) {
      const GdnResult r = core(in);
      return std::vector<torch::Tensor>{r.output, r.final_state};
    };
  };
  const auto reference = as_fn([&](const std::vector<torch::Tensor>& in) {
    return gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], in[5], chunk);
  });
  const auto recurrent = as_fn([&](const std::vector<torch::Tensor>& in) {
    return gated_delta_rule_recurrent(in[0], in[1], in[2], in[3], in[4], in[5]);
  });
  for (auto states : {lean::GdnStates::save, lean::GdnStates::recompute}) {
    INFO((states == lean::GdnStates::save ? "saved chunk states" : "recomputed chunk states"));
    const auto lean_core = as_fn([&](const std::vector<torch::Tensor>& in) {
      return lean::gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], in[5], chunk, states);
    });
    lean_matches(lean_core, reference, {q, k, v, beta, g, S0});
    lean_matches(lean_core, recurrent, {q, k, v, beta, g, S0});
  }
  // no initial state, only the output used (the final state's gradient undefined)
  const auto output_only = [&](bool lean_path) -> Fn {
    return [&, lean_path](const std::vector<torch::Tensor>& in) {
      auto r = lean_path ? lean::gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], {}, chunk)
                         : gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], {}, chunk);
      return std::vector<torch::Tensor>{r.output};
    };
  };
  lean_matches(output_only(true), output_only(false), {q, k, v, beta, g});
}

namespace {

// loss and gradients of hidden and weight, full logits or chunked
std::vector<torch::Tensor> loss_and_grads(const torch::Tensor& h0, const torch::Tensor& w0,
                                          const torch::Tensor& targets, int64_t rows,
                                          bool train_w) {
  auto h = h0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(train_w);
  auto loss = rows == 0 ? hlp::model::cross_entropy_loss(torch::matmul(h, w.t()), targets)
                        : chunked_linear_cross_entropy(h, w, targets, rows);
  (loss * 1.7).backward();
  std::vector<torch::Tensor> out;
  out.push_back(loss.detach().reshape({1}));
  out.push_back(h.grad());
  if (train_w) out.push_back(w.grad());
  return out;
}

}  // namespace

TEST_CASE("lean: chunked linear cross entropy = full logits (float64 1e-12, float32 1e-6)",
          "[model][lean][loss]") {
  torch::manual_seed(9);
  const int64_t N = 53, D = 16, V = 97;  // 53 rows: chunks of 7 leave a partial one
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-6;
    const auto h = torch::randn({N, D}, torch::TensorOptions().dtype(dtype));
    const auto w = torch::randn({V, D}, torch::TensorOptions().dtype(dtype)) * 0.3;
    auto targets = torch::randint(V, {N}, torch::kLong);
    targets[4] = -100;  // ignored, as cross_entropy's ignore_index
    targets[40] = -100;
    for (bool train_w : {false, true})
      for (int64_t rows : {7, 53, 1000}) {
        INFO("dtype " << dtype << " trainable head " << train_w << " rows " << rows);
        const auto full = loss_and_grads(h, w, targets, 0, train_w);
        const auto chunked = loss_and_grads(h, w, targets, rows, train_w);
        REQUIRE(full.size() == chunked.size());
        for (size_t i = 0; i < full.size(); ++i) {
          INFO("tensor " << i << " (loss, d hidden, d weight)");
          CHECK(relative_error(chunked[i], full[i]) < tol);
        }
      }
  }
  CHECK(loss_chunk_rows(151936) == 110);
  CHECK(loss_chunk_rows(257) == (int64_t(1) << 24) / 257);
}

TEST_CASE("lean: a model's loss with --loss-impl chunked = full, tied and untied head",
          "[model][lean][loss]") {
  for (bool tied : {true, false}) {
    INFO("tied " << tied);
    auto c = preset("tiny").with_pattern("GA");
    c.tied_embeddings = tied;
    HybridLM model(c, 3);
    model->to(torch::kFloat64);
    torch::manual_seed(5);
    auto tokens = torch::randint(c.vocab, {2, 17}, torch::kLong);
    auto inputs = tokens.narrow(1, 0, 16), targets = tokens.narrow(1, 1, 16);
    std::vector<std::vector<torch::Tensor>> grads;
    std::vector<double> losses;
    for (auto impl : {LossImpl::full, LossImpl::chunked}) {
      model->set_loss_impl(impl);
      model->zero_grad();
      auto loss = model->forward_loss(inputs, targets);
      loss.backward();
      losses.push_back(loss.item<double>());
      std::vector<torch::Tensor> g;
      for (const auto& p : model->parameters())
        if (p.grad().defined()) g.push_back(p.grad().clone());
      grads.push_back(g);
    }
    CHECK(std::abs(losses[0] - losses[1]) / losses[0] < 1e-12);
    REQUIRE(grads[0].size() == grads[1].size());
    REQUIRE(!grads[0].empty());
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(relative_error(grads[1][i], grads[0][i]) < 1e-12);
  }
}

TEST_CASE("lean: chunked cross entropy under bf16 autocast follows autocast's full loss",
          "[model][lean][loss]") {
  torch::manual_seed(10);
  const int64_t N = 40, D = 32, V = 64;
  const auto h = torch::randn({N, D}), w = torch::randn({V, D}) * 0.3;
  const auto targets = torch::randint(V, {N}, torch::kLong);
  std::vector<std::vector<torch::Tensor>> runs;
  for (int64_t rows : {0, 9}) {
    set_autocast(at::kCPU, true, at::kBFloat16);
    auto hh = h.clone().requires_grad_(true);
    auto loss = rows == 0 ? hlp::model::cross_entropy_loss(torch::matmul(hh, w.t()), targets)
                          : chunked_linear_cross_entropy(hh, w, targets, rows);
    set_autocast(at::kCPU, false, at::kBFloat16);
    at::autocast::clear_cache();
    CHECK(loss.scalar_type() == torch::kFloat);
    loss.backward();
    CHECK(hh.grad().scalar_type() == torch::kFloat);
    runs.push_back({loss.detach().reshape({1}), hh.grad()});
  }
  // the same bf16 products and float32 softmax; only summation orders differ
  CHECK(relative_error(runs[1][0], runs[0][0]) < 1e-5);
  CHECK(relative_error(runs[1][1], runs[0][1]) < 2e-2);
}
