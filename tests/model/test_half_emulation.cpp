// The CPU float16 emulation of --precision fp16 (model/half_emulation.h): IEEE binary16 rounding
// of values and of gradients (overflow to inf is what the loss scaler must see), linear / matmul
// equal to an fp16 GEMM with fp32 accumulation, and exactly F::linear / matmul when off.
#include "catch_compat.h"

#include <cmath>
#include <limits>

#include "model/half_emulation.h"

using namespace hlp;
namespace F = torch::nn::functional;

TEST_CASE("half emulation: values round to binary16, beyond 65504 to inf", "[half]") {
  auto v = torch::tensor({65504.0f, 65520.0f, 1e5f, -1e5f, 1.0f + 1.0f / 4096, 2e-8f, 1e-3f});
  auto r = model::round_to_half(v);
  CHECK(r.scalar_type() == torch::kFloat);
  CHECK(r[0].item<float>() == 65504.0f);  // the largest fp16
  CHECK(std::isinf(r[1].item<float>()));  // rounds up past the largest: inf, as on a GPU
  CHECK(std::isinf(r[2].item<float>()));
  CHECK(r[3].item<float>() == -std::numeric_limits<float>::infinity());
  CHECK(r[4].item<float>() == 1.0f);  // a quarter of fp16's step at 1 (2^-10): rounds down
  CHECK(r[5].item<float>() == 0.0f);  // below half the smallest subnormal (2^-24 = 6e-8)
  CHECK(r[6].item<float>() == Approx(1e-3).epsilon(1e-3));
  CHECK(r[6].item<float>() != 1e-3f);  // rounded, not kept
}

TEST_CASE("half emulation: gradients through a rounded tensor are rounded too", "[half]") {
  auto x = torch::ones({3}, torch::requires_grad());
  auto y = model::round_to_half(x);
  y.backward(torch::tensor({1e5f, 1.0f + 1.0f / 4096, 1e-9f}));
  CHECK(std::isinf(x.grad()[0].item<float>()));  // the overflow the loss scaler detects
  CHECK(x.grad()[1].item<float>() == 1.0f);
  CHECK(x.grad()[2].item<float>() == 0.0f);  // underflow: what loss scaling prevents
}

TEST_CASE("half emulation: off is exactly linear / matmul, on is an fp16 GEMM", "[half]") {
  torch::manual_seed(3);
  auto x = torch::randn({4, 5, 16});
  auto w = torch::randn({8, 16});
  auto b = torch::randn({8});
  CHECK(torch::equal(model::linear(x, w, b), F::linear(x, w, b)));
  CHECK(torch::equal(model::matmul(x, w.t()), torch::matmul(x, w.t())));
  CHECK_FALSE(model::half_emulation_enabled());
  torch::Tensor y, m;
  {
    model::HalfEmulationGuard on(true);
    CHECK(model::half_emulation_enabled());
    {
      model::HalfEmulationGuard keep(false);  // false leaves the switch as it is
      CHECK(model::half_emulation_enabled());
    }
    y = model::linear(x, w, b);
    m = model::matmul(x, w.t());
  }
  CHECK_FALSE(model::half_emulation_enabled());
  auto h = [](const torch::Tensor& t) { return t.to(torch::kHalf).to(torch::kFloat); };
  // fp16 operands, products exact in fp32, fp32 sums, result rounded to fp16
  CHECK(torch::equal(y, h(F::linear(h(x), h(w), h(b)))));
  CHECK(torch::equal(m, h(torch::matmul(h(x), h(w).t()))));
  CHECK(torch::equal(y, h(y)));  // holds fp16 values
  CHECK_FALSE(torch::equal(y, F::linear(x, w, b)));
  CHECK(torch::allclose(y, F::linear(x, w, b), 1e-2, 1e-2));
}
