// The chunked gated-delta core equals the token-by-token recurrence (outputs, final state,
// gradients), for T not a multiple of the chunk and with a non-zero initial state.
#include "catch_compat.h"
#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/torch.h>

#include "model/autocast_state.h"
#include "model/gdn_core.h"
#include "test_helpers.h"

using namespace hlp::model;
using hlp::model::testing::relative_error;

namespace {

struct CoreInputs {
  torch::Tensor q, k, v, beta, g, state;
  std::vector<torch::Tensor> all() const { return {q, k, v, beta, g, state}; }
};

// Inputs shaped like the layer makes them: unit-norm k, q scaled by dk^-1/2, beta in (0, 1),
// log decay g <= 0 (up to about -4 per token, so in-chunk decays span many orders).
CoreInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t dk, int64_t dv,
                       torch::ScalarType dtype, bool with_state) {
  torch::manual_seed(42);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  CoreInputs in;
  in.q = (unit(torch::randn({B, T, H, dk}, opts)) / std::sqrt(double(dk))).to(dtype);
  in.k = unit(torch::randn({B, T, H, dk}, opts)).to(dtype);
  in.v = torch::randn({B, T, H, dv}, opts).to(dtype);
  in.beta = torch::sigmoid(torch::randn({B, T, H}, opts)).to(dtype);
  in.g = (-torch::softplus(torch::randn({B, T, H}, opts) * 2)).to(dtype);
  in.state = with_state ? torch::randn({B, H, dk, dv}, opts).to(dtype)
                        : torch::zeros({B, H, dk, dv}, opts).to(dtype);
  for (auto* t : {&in.q, &in.k, &in.v, &in.beta, &in.g, &in.state}) t->requires_grad_(true);
  return in;
}

void check_chunked_equals_recurrent(torch::ScalarType dtype, double tolerance, int64_t T,
                                    int64_t chunk, bool with_state) {
  auto in = make_inputs(2, T, 3, 8, 16, dtype, with_state);
  auto ref = gated_delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.g, in.state);
  auto fast = gated_delta_rule_chunked(in.q, in.k, in.v, in.beta, in.g, in.state, chunk);
  REQUIRE(fast.output.sizes() == ref.output.sizes());
  REQUIRE(fast.final_state.sizes() == ref.final_state.sizes());
  CHECK(relative_error(fast.output, ref.output) < tolerance);
  CHECK(relative_error(fast.final_state, ref.final_state) < tolerance);

  // Gradients of one random projection of (output, final state) w.r.t. every input.
  torch::manual_seed(7);
  auto w_out = torch::randn_like(ref.output), w_state = torch::randn_like(ref.final_state);
  auto loss_of = [&](const GdnResult& r) {
    return (r.output * w_out).sum() + (r.final_state * w_state).sum();
  };
  auto grads_ref = torch::autograd::grad({loss_of(ref)}, in.all());
  auto grads_fast = torch::autograd::grad({loss_of(fast)}, in.all());
  const char* names[] = {"q", "k", "v", "beta", "g", "initial_state"};
  for (size_t i = 0; i < grads_ref.size(); ++i) {
    INFO("gradient w.r.t. " << names[i]);
    CHECK(relative_error(grads_fast[i], grads_ref[i]) < tolerance);
  }
}

}  // namespace

TEST_CASE("model: gdn chunked equals recurrent in float64 (T=100, chunk 64, initial state)", "[model][gdn]") {
  check_chunked_equals_recurrent(torch::kFloat64, 1e-10, 100, 64, true);
}

TEST_CASE("model: gdn chunked equals recurrent in float64 (T=37, chunk 8, zero state)", "[model][gdn]") {
  check_chunked_equals_recurrent(torch::kFloat64, 1e-10, 37, 8, false);
}

TEST_CASE("model: gdn chunked equals recurrent in float32 to 1e-4 relative (T=100, chunk 64)", "[model][gdn]") {
  check_chunked_equals_recurrent(torch::kFloat32, 1e-4, 100, 64, true);
}

TEST_CASE("model: gdn chunked with T shorter than one chunk equals recurrent", "[model][gdn]") {
  check_chunked_equals_recurrent(torch::kFloat64, 1e-10, 5, 64, true);
}

TEST_CASE("model: gdn state carries over: two halves with state hand-over equal one pass", "[model][gdn]") {
  auto in = make_inputs(1, 48, 2, 4, 6, torch::kFloat64, true);
  auto whole = gated_delta_rule_chunked(in.q, in.k, in.v, in.beta, in.g, in.state, 16);
  auto half = [&](const torch::Tensor& x, int64_t start) { return x.narrow(1, start, 24); };
  auto first = gated_delta_rule_chunked(half(in.q, 0), half(in.k, 0), half(in.v, 0),
                                        half(in.beta, 0), half(in.g, 0), in.state, 16);
  auto second = gated_delta_rule_chunked(half(in.q, 24), half(in.k, 24), half(in.v, 24),
                                         half(in.beta, 24), half(in.g, 24), first.final_state, 16);
  CHECK(relative_error(torch::cat({first.output, second.output}, 1), whole.output) < 1e-12);
  CHECK(relative_error(second.final_state, whole.final_state) < 1e-12);
}

TEST_CASE("model: gdn core gradients match finite differences (float64)", "[model][gdn][gradcheck]") {
  auto in = make_inputs(1, 7, 2, 3, 4, torch::kFloat64, true);
  auto fn = [&] {
    auto r = gated_delta_rule_chunked(in.q, in.k, in.v, in.beta, in.g, in.state, 3);
    return torch::cat({r.output.reshape(-1), r.final_state.reshape(-1)});
  };
  auto result = hlp::model::testing::gradcheck(fn, in.all());
  INFO("max abs error " << result.max_abs_error << " over " << result.entries << " entries");
  CHECK(result.entries > 50);
  CHECK(result.max_rel_error < 1e-6);
}

namespace {
bool excluded(c10::DispatchKey key) { return c10::impl::tls_is_dispatch_key_excluded(key); }
}  // namespace

TEST_CASE("gdn: the fp32 core region holds off CPU and CUDA autocast alike", "[model][gdn][precision]") {
  // The Gated DeltaNet core runs inside NoAutocastGuard. Autocast works by taking its key out of
  // the thread's excluded set; the guard must put both back while it lives. On a GPU it is CUDA
  // autocast that would recast the core's matmuls, and its switch works without a GPU, so the
  // key itself is checked; CPU autocast stands in for the behaviour: under autocast a float32
  // matmul comes out bfloat16, inside the guard float32.
  auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
  set_autocast(at::kCPU, true, at::kBFloat16);
  set_autocast(at::kCUDA, true, at::kHalf);  // no GPU needed: it changes the excluded key set
  const bool cuda_on_outside = !excluded(c10::DispatchKey::AutocastCUDA);
  const auto outside = torch::matmul(a, b).scalar_type();
  torch::ScalarType inside;
  bool cuda_excluded = false, cpu_excluded = false;
  {
    NoAutocastGuard guard;
    inside = torch::matmul(a, b).scalar_type();
    cuda_excluded = excluded(c10::DispatchKey::AutocastCUDA);
    cpu_excluded = excluded(c10::DispatchKey::AutocastCPU);
  }
  const bool cuda_on_after = !excluded(c10::DispatchKey::AutocastCUDA);
  const bool cpu_on_after = !excluded(c10::DispatchKey::AutocastCPU);
  set_autocast(at::kCUDA, false, at::kHalf);
  set_autocast(at::kCPU, false, at::kBFloat16);
  at::autocast::clear_cache();
  CHECK(cuda_on_outside);
  CHECK(outside == torch::kBFloat16);
  CHECK(inside == torch::kFloat);
  CHECK(cuda_excluded);
  CHECK(cpu_excluded);
  CHECK(cuda_on_after);
  CHECK(cpu_on_after);
}
