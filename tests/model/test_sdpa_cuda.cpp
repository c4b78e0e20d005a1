// CUDA-only parity of --attn-impl sdpa (at::scaled_dot_product_attention, LibTorch >= 2) with the
// naive and blocked kernels: forward output and dq/dk/dv, full causal and sliding window, MHA and
// GQA, fp32 and bf16; plus which fused kernel SDPA picks (the sliding-window band mask must run
// the memory-efficient kernel, never the O(T^2) math fallback, in bf16).
//
// No GPU (or a LibTorch < 2 / without CUDA): prints one SKIP line and exits 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE). tools/gpu-check.sh runs it on a GPU machine.
// Plain main(), not Catch2 v2: Catch v2 cannot report a skip.
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/blocked_attention.h"
#include "model/sdpa_attention.h"

namespace {

using hlp::model::blocked_attention;
using hlp::model::causal_window_mask;
using hlp::model::naive_attention;
using hlp::model::sdpa_attention;

int failures = 0;

// max |a - b| / max |b| (b the reference)
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.detach().to(torch::kCPU, torch::kFloat64), b64 = b.detach().to(torch::kCPU, torch::kFloat64);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1e-30);
}

struct Result {
  torch::Tensor out, dq, dk, dv;
};

// out = attn(q, k, v); grads of sum(out * w). Inputs are cast to dtype and moved to device.
template <class Fn>
Result run(Fn attn, const std::vector<torch::Tensor>& qkvw, torch::Device device, torch::Dtype dtype) {
  auto leaf = [&](const torch::Tensor& t) {
    return t.to(device, dtype).detach().requires_grad_(true);
  };
  auto q = leaf(qkvw[0]), k = leaf(qkvw[1]), v = leaf(qkvw[2]);
  auto out = attn(q, k, v);
  (out.to(torch::kFloat32) * qkvw[3].to(device, torch::kFloat32)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check(const std::string& what, double err, double tol) {
  const bool ok = err <= tol;
  if (!ok) ++failures;
  std::printf("%s %-62s rel err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), err, tol);
}

}  // namespace

int main() {
  const torch::Device cuda(torch::kCUDA, 0);
  if (!torch::cuda::is_available()) {
    std::printf("SKIP: sdpa CUDA parity needs a CUDA GPU and a CUDA LibTorch (this is LibTorch %s, "
                "CUDA available: no); tools/gpu-check.sh runs it on a GPU machine\n",
                TORCH_VERSION);
    return 77;
  }
  if (!hlp::model::sdpa_available(cuda)) {
    std::printf("SKIP: sdpa CUDA parity: LibTorch %s has no scaled_dot_product_attention (>= 2.0)\n",
                TORCH_VERSION);
    return 77;
  }
  std::printf("sdpa parity on %s, LibTorch %s\n", torch::cuda::device_count() > 0 ? "cuda:0" : "?",
              TORCH_VERSION);
  const int64_t B = 2, hd = 32;
  struct Heads { int64_t h, kvh; };
  for (Heads heads : {Heads{4, 4}, Heads{4, 2}, Heads{6, 1}}) {
    for (int64_t T : {1, 37, 160}) {
      for (int64_t window : {int64_t{0}, int64_t{5}, int64_t{64}, T + 3}) {
        torch::manual_seed(17 + T + window);  // CPU generator: identical inputs on every device
        auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
        std::vector<torch::Tensor> qkvw = {
            torch::randn({B, heads.h, T, hd}, f64), torch::randn({B, heads.kvh, T, hd}, f64),
            torch::randn({B, heads.kvh, T, hd}, f64), torch::randn({B, heads.h, T, hd}, f64)};
        auto naive = [&](auto q, auto k, auto v) { return naive_attention(q, k, v, window); };
        auto blocked = [&](auto q, auto k, auto v) { return blocked_attention(q, k, v, window); };
        auto sdpa = [&](auto q, auto k, auto v) { return sdpa_attention(q, k, v, window); };
        const Result ref = run(naive, qkvw, torch::kCPU, torch::kFloat64);
        const Result blk = run(blocked, qkvw, torch::kCPU, torch::kFloat32);
        char tag[96];
        for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
          const bool bf16 = dtype == torch::kBFloat16;
          const double tol = bf16 ? 3e-2 : 2e-4;  // bf16: 8 mantissa bits; fp32 may use TF32-free fused kernels
          const Result got = run(sdpa, qkvw, cuda, dtype);
          std::snprintf(tag, sizeof tag, "H=%lld KVH=%lld T=%lld window=%lld %s",
                        (long long)heads.h, (long long)heads.kvh, (long long)T, (long long)window,
                        bf16 ? "bf16" : "fp32");
          check(std::string(tag) + " out  vs naive", rel(got.out, ref.out), tol);
          check(std::string(tag) + " dq   vs naive", rel(got.dq, ref.dq), tol);
          check(std::string(tag) + " dk   vs naive", rel(got.dk, ref.dk), tol);
          check(std::string(tag) + " dv   vs naive", rel(got.dv, ref.dv), tol);
          check(std::string(tag) + " out  vs blocked", rel(got.out, blk.out), tol);
          check(std::string(tag) + " dq   vs blocked", rel(got.dq, blk.dq), tol);
        }
      }
    }
  }
  // Which kernel SDPA picks for what sdpa_attention() passes it (sdp::SDPBackend: -1 error,
  // 0 math, 1 flash, 2 memory-efficient, 3 cuDNN). bf16 at T = 4096, hd = 64 must not be math.
  // (Compiled for LibTorch >= 2 only; on 1.13 main() returned above.)
#if TORCH_VERSION_MAJOR >= 2
  {
    const int64_t T = 4096, H = 8;
    auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(cuda);
    auto q = torch::randn({1, H, T, 64}, opts), k = torch::randn({1, H, T, 64}, opts);
    const char* names[] = {"math", "flash", "memory-efficient", "cudnn", "overrideable"};
    for (int64_t window : {int64_t{0}, int64_t{1024}}) {
      const int64_t choice =
          window <= 0 ? at::_fused_sdp_choice(q, k, k, {}, 0.0, /*is_causal=*/true)
                      : at::_fused_sdp_choice(q, k, k, causal_window_mask(T, window, cuda), 0.0, false);
      const bool ok = choice > 0;
      if (!ok) ++failures;
      std::printf("%s kernel for bf16 T=4096 window=%-5lld: %s (%lld)\n", ok ? "ok  " : "FAIL",
                  (long long)window, choice >= 0 && choice <= 4 ? names[choice] : "error",
                  (long long)choice);
    }
  }
#endif
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
