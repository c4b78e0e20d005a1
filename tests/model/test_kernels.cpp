// Parity of every fused CPU kernel (src/model/kernels/) with the op-by-op reference, float64,
// outputs and every input gradient within 1e-10 (relative to the largest reference entry):
// B > 1, non-contiguous inputs, T not a multiple of the chunk, non-zero initial state. Then
// whole-model training, fused vs reference kernels, float32, 5 AdamW steps within 1e-6.
#include "catch_compat.h"
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model/gated_deltanet.h"
#include "model/gdn_core.h"
#include "model/hybrid_lm.h"
#include "model/kernels/fused_ops.h"
#include "model/layers.h"
#include "model/lora.h"
#include "parity_helpers.h"
#include "test_helpers.h"

using namespace hlp::model;
using hlp::model::testing::relative_error;

namespace {

using namespace hlp::model::testing::parity;

}  // namespace

TEST_CASE("kernels: --kernels parses auto | fused | lean | reference, auto by default",
          "[model][kernels]") {
  CHECK(parse_kernels("fused") == Kernels::fused);
  CHECK(parse_kernels("reference") == Kernels::reference);
  CHECK(parse_kernels("lean") == Kernels::lean);
  CHECK(parse_kernels("auto") == Kernels::automatic);
  CHECK_THROWS_AS(parse_kernels("fast"), hlp::UserError);
  CHECK(to_string(Kernels::reference) == "reference");
  CHECK(ModelConfig{}.kernels == Kernels::automatic);
  CHECK(resolve_kernels(Kernels::automatic, /*cuda=*/false) == Kernels::fused);
  CHECK(resolve_kernels(Kernels::automatic, /*cuda=*/true) == Kernels::lean);
  CHECK(resolve_kernels(Kernels::reference, /*cuda=*/true) == Kernels::reference);
  CHECK(preset("small").summary().find("kernels=auto") != std::string::npos);
  CHECK(parse_loss_impl("chunked") == LossImpl::chunked);
  CHECK(parse_loss_impl("full") == LossImpl::full);
  CHECK_THROWS_AS(parse_loss_impl("fast"), hlp::UserError);
  CHECK(ModelConfig{}.loss_impl == LossImpl::chunked);
}

TEST_CASE("kernels: RMSNorm fused = reference (float64, non-contiguous, weight grad)",
          "[model][kernels]") {
  torch::manual_seed(1);
  RMSNorm norm(37, 1e-6);
  norm->to(torch::kFloat64);
  const auto w = torch::rand({37}, kF64) + 0.5;
  const auto x = noncontiguous(3, 11, 37);
  auto run = [&](Kernels k) {
    return outputs_and_grads(
        [&](const std::vector<torch::Tensor>& in) {
          norm->weight = in[1];
          norm->kernels = k;
          return std::vector<torch::Tensor>{norm->forward(in[0])};
        },
        {x, w});
  };
  check_parity(run(Kernels::fused), run(Kernels::reference));
}

TEST_CASE("kernels: gated RMSNorm (o_norm * SiLU(gate)) fused = reference", "[model][kernels]") {
  torch::manual_seed(2);
  const auto x = noncontiguous(2, 9, 24), gate = noncontiguous(2, 9, 24);
  const auto w = torch::rand({24}, kF64) + 0.5;
  auto fused = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{fused::gated_rms_norm(in[0], in[1], in[2], 1e-6)};
      },
      {x, w, gate});
  auto ref = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        auto r = torch::rsqrt(in[0].pow(2).mean(-1, true) + 1e-6);
        return std::vector<torch::Tensor>{in[0] * r * in[1] * torch::silu(in[2])};
      },
      {x, w, gate});
  check_parity(fused, ref);
}

TEST_CASE("kernels: SwiGLU SiLU(gate) * up fused = reference", "[model][kernels]") {
  torch::manual_seed(3);
  const auto gate = noncontiguous(2, 13, 29) * 3, up = noncontiguous(2, 13, 29);
  auto fused = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{fused::swiglu(in[0], in[1])};
      },
      {gate, up});
  auto ref = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{torch::silu(in[0]) * in[1]};
      },
      {gate, up});
  check_parity(fused, ref);
}

TEST_CASE("kernels: JetBlock dynamic convolution fused = reference (no windows tensor)",
          "[model][kernels]") {
  torch::manual_seed(4);
  const int64_t B = 2, T = 10, C = 12, W = 4;
  DynamicShortConv conv(/*generator_in=*/8, C, W, /*reduction=*/2);
  conv->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : conv->parameters()) p.normal_(0, 0.4);  // built outside HybridLM: no init yet
  }
  const auto x = noncontiguous(B, T, C), gen = noncontiguous(B, T, 8);
  auto run = [&](Kernels k) {
    conv->kernels = k;
    return outputs_and_grads(
        [&](const std::vector<torch::Tensor>& in) {
          return std::vector<torch::Tensor>{conv->forward(in[0], in[1])};
        },
        {x, gen});
  };
  check_parity(run(Kernels::fused), run(Kernels::reference));
  // the generator's own weights get the same gradients too
  conv->zero_grad();
  conv->kernels = Kernels::fused;
  (conv->forward(x, gen) * 0.7).sum().backward();
  auto fused_w2 = conv->w2->weight.grad().clone();
  conv->zero_grad();
  conv->kernels = Kernels::reference;
  (conv->forward(x, gen) * 0.7).sum().backward();
  CHECK(relative_error(fused_w2, conv->w2->weight.grad()) < kTol);
}

TEST_CASE("kernels: L2 normalisation (with and without SiLU) fused = reference",
          "[model][kernels]") {
  torch::manual_seed(5);
  const int64_t d = 6;
  const auto x = noncontiguous(2, 7, 3 * d);
  for (bool apply_silu : {true, false}) {
    for (double scale : {1.0, 1.0 / std::sqrt(double(d))}) {
      INFO("apply_silu " << apply_silu << " scale " << scale);
      auto fused = outputs_and_grads(
          [&](const std::vector<torch::Tensor>& in) {
            return std::vector<torch::Tensor>{fused::l2_normalize(in[0], d, scale, apply_silu)};
          },
          {x});
      auto ref = outputs_and_grads(
          [&](const std::vector<torch::Tensor>& in) {
            auto n = (apply_silu ? torch::silu(in[0]) : in[0]).view({2, 7, 3, d});
            auto y = n * torch::rsqrt(n.pow(2).sum(-1, true) + 1e-6) * scale;
            return std::vector<torch::Tensor>{y.view({2, 7, 3 * d})};
          },
          {x});
      check_parity(fused, ref);
    }
  }
}

TEST_CASE("kernels: GDN gates beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)",
          "[model][kernels]") {
  torch::manual_seed(6);
  const int64_t H = 3;
  auto a = noncontiguous(2, 9, H) * 8;  // reaches softplus' linear branch (> 20) with dt_bias
  const auto b = noncontiguous(2, 9, H);
  const auto A_log = torch::rand({H}, kF64) * 2;
  const auto dt_bias = torch::tensor({-1.0, 0.5, 15.0}, kF64);
  auto fused = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        auto [beta, g] = fused::gdn_gates(in[0], in[1], in[2], in[3]);
        return std::vector<torch::Tensor>{beta, g};
      },
      {a, b, A_log, dt_bias});
  auto ref = outputs_and_grads(
      [](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{torch::sigmoid(in[1]),
                                          -in[2].exp() * torch::softplus(in[0] + in[3])};
      },
      {a, b, A_log, dt_bias});
  check_parity(fused, ref);
}

TEST_CASE("kernels: gated delta rule fused chunked = reference chunked and recurrent",
          "[model][kernels][gdn]") {
  const GdnInputs gdn = gdn_parity_inputs();
  const int64_t chunk = gdn.chunk;
  const torch::Tensor &q = gdn.q, &k = gdn.k, &v = gdn.v, &beta = gdn.beta, &g = gdn.g, &S0 = gdn.S0;
  auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  auto run = [&](const std::function<GdnResult(const std::vector<torch::Tensor>&)>& core) {
    std::vector<torch::Tensor> in;
    for (const auto& t : {q, k, v, beta, g, S0}) in.push_back(leaf(t));
    in[0] = q.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(true);
    auto r = core(in);
    torch::manual_seed(11);
    auto loss = (r.output * torch::randn(r.output.sizes(), kF64)).sum() +
                (r.final_state * torch::randn(r.final_state.sizes(), kF64)).sum();
    loss.backward();
    std::vector<torch::Tensor> out{r.output.detach(), r.final_state.detach()};
    for (const auto& t : in) out.push_back(t.grad());
    return out;
  };
  const auto reference = run([&](const std::vector<torch::Tensor>& in) {
    return gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], in[5], chunk);
  });
  const auto recurrent = run([&](const std::vector<torch::Tensor>& in) {
    return gated_delta_rule_recurrent(in[0], in[1], in[2], in[3], in[4], in[5]);
  });
  for (auto states : {fused::GdnStates::save, fused::GdnStates::recompute}) {
    INFO((states == fused::GdnStates::save ? "saved chunk states" : "recomputed chunk states"));
    const auto fused_out = run([&](const std::vector<torch::Tensor>& in) {
      return fused::gated_delta_rule_chunked(in[0], in[1], in[2], in[3], in[4], in[5], chunk,
                                             states);
    });
    check_parity(fused_out, reference);
    check_parity(fused_out, recurrent);
  }
}

TEST_CASE("kernels: gated delta rule fused without initial state, T < chunk", "[model][kernels][gdn]") {
  torch::manual_seed(8);
  const int64_t B = 2, T = 5, H = 2, dk = 4, dv = 3;
  auto q = torch::randn({B, T, H, dk}, kF64) * 0.3, k = torch::randn({B, T, H, dk}, kF64) * 0.3;
  auto v = torch::randn({B, T, H, dv}, kF64), beta = torch::sigmoid(torch::randn({B, T, H}, kF64));
  auto g = -torch::softplus(torch::randn({B, T, H}, kF64));
  auto fused_r = fused::gated_delta_rule_chunked(q, k, v, beta, g, {}, 64);
  auto ref = gated_delta_rule_chunked(q, k, v, beta, g, {}, 64);
  CHECK(relative_error(fused_r.output, ref.output) < kTol);
  CHECK(relative_error(fused_r.final_state, ref.final_state) < kTol);
}

namespace {

// Five AdamW steps of a LoRA model; returns the losses and the final adapters.
std::pair<std::vector<double>, std::vector<torch::Tensor>> train_five_steps(
    ModelConfig c, Kernels kernels, torch::Dtype dtype) {
  c.kernels = kernels;
  HybridLM model(c, 5);
  model->to(dtype);
  {
    torch::NoGradGuard no_grad;  // JetBlock's w2 would start at 0: exercise the generator path
    torch::manual_seed(12);
    for (auto& item : model->named_parameters())
      if (item.key().find("kernel_generator.w2.weight") != std::string::npos)
        item.value().normal_(0, 0.05);
  }
  apply_lora(model, make_lora_config(4, 8, 0.0, "q_proj,k_proj,v_proj,o_proj,w1,w2"));
  model->train();
  torch::optim::AdamW opt(trainable_parameters(*model), torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(13);
  auto tokens = torch::randint(c.vocab, {3, 41}, torch::kLong);
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    auto loss = hlp::model::cross_entropy_loss(model->forward(tokens.narrow(1, 0, 40)), tokens.narrow(1, 1, 40));
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : trainable_parameters(*model)) params.push_back(p.detach().clone());
  return {losses, params};
}

}  // namespace

// float32: the losses of 5 steps agree within 1e-6. The adapters after 5 AdamW steps are not
// compared in float32: Adam divides by sqrt(v), so an entry whose gradient is at rounding level
// moves by up to lr either way (measured: 1e-3 relative); float64 compares them at 1e-9.
TEST_CASE("kernels: 5 training steps fused and lean = reference (float32 losses 1e-6, float64 all 1e-9)",
          "[model][kernels][training]") {
  for (auto variant : {GdnVariant::jetblock, GdnVariant::gated_deltanet}) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      const bool f64 = dtype == torch::kFloat64;
      INFO((variant == GdnVariant::jetblock ? "jetblock" : "gated_deltanet") << (f64 ? " float64" : " float32"));
      auto c = preset("tiny").with_pattern("GAGSG");
      c.gdn_variant = variant;
      c.gdn_chunk = 16;  // T = 40: three chunks, the last one partial
      const auto ref_run = train_five_steps(c, Kernels::reference, dtype);
      for (auto kernels : {Kernels::fused, Kernels::lean}) {
        INFO(to_string(kernels));
        const auto run = train_five_steps(c, kernels, dtype);
        const double tol = f64 ? 1e-9 : 1e-6;
        for (size_t s = 0; s < 5; ++s) {
          INFO("step " << s << ": " << run.first[s] << " reference " << ref_run.first[s]);
          CHECK(std::abs(run.first[s] - ref_run.first[s]) / std::abs(ref_run.first[s]) < tol);
        }
        if (!f64) continue;
        REQUIRE(run.second.size() == ref_run.second.size());
        double worst = 0;
        for (size_t i = 0; i < ref_run.second.size(); ++i)
          worst = std::max(worst, relative_error(run.second[i], ref_run.second[i]));
        INFO("worst relative parameter difference " << worst);
        CHECK(worst < tol);
      }
    }
  }
}
