#pragma once
// Parity helpers of the kernel tests (test_kernels.cpp, test_lean.cpp): float64 inputs,
// outputs and every input gradient compared within 1e-10 relative to the largest entry.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "catch_compat.h"
#include "test_helpers.h"

namespace hlp::model::testing::parity {

inline constexpr double kTol = 1e-10;
inline const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// [B, T, D] float64 that is not contiguous (a transposed [T, B, D] buffer)
inline torch::Tensor noncontiguous(int64_t B, int64_t T, int64_t D) {
  auto x = torch::randn({T, B, D}, kF64).transpose(0, 1);
  REQUIRE(!x.is_contiguous());
  return x;
}

// Runs fn on fresh leaf copies of inputs, backpropagates sum(w_i * out_i) with fixed random
// w_i, returns outputs followed by the input gradients.
inline std::vector<torch::Tensor> outputs_and_grads(
    const std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>& fn,
    const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  // keep the layouts of the originals (non-contiguous stays non-contiguous)
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].is_contiguous())
      leaves[i] = inputs[i].detach().clone().transpose(0, 1).contiguous().transpose(0, 1)
                      .requires_grad_(true);
  auto outs = fn(leaves);
  torch::manual_seed(99);
  torch::Tensor loss = torch::zeros({}, kF64);
  // randn(sizes), not randn_like: the reference's outputs may have permuted strides
  for (const auto& o : outs) loss = loss + (o * torch::randn(o.sizes(), kF64)).sum();
  loss.backward();
  std::vector<torch::Tensor> result;
  for (const auto& o : outs) result.push_back(o.detach());
  for (const auto& l : leaves) result.push_back(l.grad().defined() ? l.grad() : torch::zeros_like(l));
  return result;
}

inline void check_parity(const std::vector<torch::Tensor>& fused, const std::vector<torch::Tensor>& ref) {
  REQUIRE(fused.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("tensor " << i << " of " << ref.size() << " (outputs first, then input gradients)");
    REQUIRE(fused[i].sizes() == ref[i].sizes());
    CHECK(relative_error(fused[i], ref[i]) < kTol);
  }
}

// Inputs of the delta-rule parity tests: B 2, T 37 (not a multiple of the chunk 8), H 3, dk 5,
// dv 7, float64; q, k L2-normalised (q also scaled by dk^-1/2), non-contiguous q, k, v ([B, T, H,
// d] views of [B, H, T, d] buffers), beta in (0, 1), g <= 0 and a non-zero initial state.
struct GdnInputs {
  int64_t chunk = 8;
  torch::Tensor q, k, v, beta, g, S0;
};
inline GdnInputs gdn_parity_inputs() {
  const int64_t B = 2, T = 37, H = 3, dk = 5, dv = 7;
  torch::manual_seed(7);
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  GdnInputs in;
  in.q = (unit(torch::randn({B, H, T, dk}, kF64)) / std::sqrt(double(dk))).transpose(1, 2);
  in.k = unit(torch::randn({B, H, T, dk}, kF64)).transpose(1, 2);
  in.v = torch::randn({B, H, T, dv}, kF64).transpose(1, 2);
  in.beta = torch::sigmoid(torch::randn({B, T, H}, kF64));
  in.g = -torch::softplus(torch::randn({B, T, H}, kF64)) * 0.5;
  in.S0 = torch::randn({B, H, dk, dv}, kF64) * 0.3;
  REQUIRE(!in.q.is_contiguous());
  return in;
}

}  // namespace hlp::model::testing::parity
