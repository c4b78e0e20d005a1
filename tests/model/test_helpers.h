#pragma once
// Shared helpers of the model tests: a small finite-difference gradcheck (LibTorch's C++ API
// has none), relative errors, and a float64 micro config for checks on every block type.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace hlp::model::testing {

// max |a - b| / max(max |b|, 1e-30)
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double diff = (a - b).abs().max().item<double>();
  const double scale = b.abs().max().item<double>();
  return diff / std::max(scale, 1e-30);
}

struct GradcheckResult {
  double max_abs_error = 0;  // |numeric - analytic|, worst entry
  double max_rel_error = 0;  // the same over max(|numeric|, 1e-3)
  int64_t entries = 0;       // how many entries were perturbed
};

// Compares autograd's gradient of L = sum(w * fn()) (w fixed random) with central finite
// differences for up to max_entries entries of each tensor in `inputs` (leaf tensors that
// require grad: inputs or module parameters). Call in float64.
inline GradcheckResult gradcheck(const std::function<torch::Tensor()>& fn,
                                 const std::vector<torch::Tensor>& inputs, double eps = 1e-6,
                                 int64_t max_entries = 40) {
  torch::manual_seed(1234);
  auto out = fn();
  auto w = torch::randn_like(out);
  auto loss = (out * w).sum();
  auto analytic = torch::autograd::grad({loss}, inputs, {}, /*retain_graph=*/false,
                                        /*create_graph=*/false, /*allow_unused=*/true);
  GradcheckResult result;
  torch::NoGradGuard no_grad;
  for (size_t n = 0; n < inputs.size(); ++n) {
    auto flat = inputs[n].view(-1);
    const int64_t numel = flat.numel();
    auto grad = analytic[n].defined() ? analytic[n].reshape(-1) : torch::zeros_like(flat);
    const int64_t stride = std::max<int64_t>(1, numel / max_entries);
    for (int64_t i = 0; i < numel; i += stride) {
      const double original = flat[i].item<double>();
      flat[i] = original + eps;
      const double plus = (fn() * w).sum().item<double>();
      flat[i] = original - eps;
      const double minus = (fn() * w).sum().item<double>();
      flat[i] = original;
      const double numeric = (plus - minus) / (2 * eps);
      const double err = std::abs(numeric - grad[i].item<double>());
      result.max_abs_error = std::max(result.max_abs_error, err);
      result.max_rel_error = std::max(result.max_rel_error, err / std::max(std::abs(numeric), 1e-3));
      ++result.entries;
    }
  }
  return result;
}

// Micro shapes for gradchecks: every block type, small enough for finite differences.
inline ModelConfig micro_config(const std::string& pattern) {
  ModelConfig c;
  c.name = "micro";
  c.pattern = pattern;
  c.hidden = 8;
  c.mlp_hidden = 12;
  c.vocab = 11;
  c.attn_heads = 2;
  c.attn_kv_heads = 1;
  c.attn_head_dim = 4;
  c.window = 3;
  c.gdn_heads = 2;
  c.gdn_head_dim_k = 4;
  c.gdn_head_dim_v = 4;
  c.gdn_chunk = 4;
  c.validate();
  return c;
}

}  // namespace hlp::model::testing
