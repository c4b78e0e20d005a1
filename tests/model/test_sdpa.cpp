// Parity of --attn-impl sdpa (at::scaled_dot_product_attention, LibTorch >= 2) with the naive and
// blocked kernels: forward output and dq/dk/dv, full causal and sliding window, MHA and GQA; plus
// which fused kernel SDPA picks for what sdpa_attention() passes it.
//   hlp_sdpa_test cuda   fp32 and bf16 on the GPU (the band mask must run the memory-efficient
//                        kernel, never the O(T^2) math fallback, in bf16)
//   hlp_sdpa_test cpu    float64 (same math: 1e-10), fp32 and bf16 on the CPU (LibTorch 2.x's
//                        CPU flash kernel); which kernel it picks is printed
// Where it cannot run (no GPU; LibTorch < 2): prints one SKIP line and exits 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE). tools/gpu-check.sh runs the cuda one on a GPU machine.
// Plain main(), not Catch2: Catch v2 cannot report a skip.
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

// max |a - b| / max(max |b|, 1) (b the reference). The floor of 1 (the inputs are standard
// normal) makes it absolute where the reference is ~0: with T = 1 a query sees one key, its
// softmax is constant and dq is exactly 0 in naive, rounding noise in a fused kernel.
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.detach().to(torch::kCPU, torch::kFloat64), b64 = b.detach().to(torch::kCPU, torch::kFloat64);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1.0);
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

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cuda";
  if (where != "cuda" && where != "cpu") {
    std::fprintf(stderr, "usage: hlp_sdpa_test cuda|cpu\n");
    return 2;
  }
  const bool on_cpu = where == "cpu";
  const torch::Device device = on_cpu ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, 0);
  if (!on_cpu && !torch::cuda::is_available()) {
    std::printf("SKIP: sdpa CUDA parity needs a CUDA GPU and a CUDA LibTorch (this is LibTorch %s, "
                "CUDA available: no); tools/gpu-check.sh runs it on a GPU machine\n",
                TORCH_VERSION);
    return 77;
  }
  if (!hlp::model::sdpa_available(device)) {
    std::printf("SKIP: sdpa %s parity: LibTorch %s has no scaled_dot_product_attention (>= 2.0)\n",
                where.c_str(), TORCH_VERSION);
    return 77;
  }
  std::printf("sdpa parity on %s, LibTorch %s\n", on_cpu ? "cpu" : "cuda:0", TORCH_VERSION);
  // Tolerances, relative to the largest reference entry. float64 (CPU): the same math, only the
  // summation order differs: 1e-10. fp32: each output is a softmax-weighted mean over up to T = 160
  // keys with fp32 exponentials and sums; 2e-4 leaves room for a GPU kernel's reduced-precision
  // paths and is ~100x what fp32 rounding gives. bf16: 8 mantissa bits (step 3.9e-3) on inputs and
  // output: 3e-2.
  std::vector<torch::ScalarType> dtypes = {torch::kFloat32, torch::kBFloat16};
  if (on_cpu) dtypes.insert(dtypes.begin(), torch::kFloat64);
  auto tolerance = [](torch::ScalarType dtype) {
    return dtype == torch::kFloat64 ? 1e-10 : dtype == torch::kBFloat16 ? 3e-2 : 2e-4;
  };
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
        for (auto dtype : dtypes) {
          const double tol = tolerance(dtype);
          const Result got = run(sdpa, qkvw, device, dtype);
          std::snprintf(tag, sizeof tag, "H=%lld KVH=%lld T=%lld window=%lld %s",
                        (long long)heads.h, (long long)heads.kvh, (long long)T, (long long)window,
                        dtype == torch::kFloat64 ? "fp64" : dtype == torch::kBFloat16 ? "bf16" : "fp32");
          check(std::string(tag) + " out  vs naive", rel(got.out, ref.out), tol);
          check(std::string(tag) + " dq   vs naive", rel(got.dq, ref.dq), tol);
          check(std::string(tag) + " dk   vs naive", rel(got.dk, ref.dk), tol);
          check(std::string(tag) + " dv   vs naive", rel(got.dv, ref.dv), tol);
          if (dtype == torch::kFloat64) continue;  // blocked ran in fp32: naive is the reference
          check(std::string(tag) + " out  vs blocked", rel(got.out, blk.out), tol);
          check(std::string(tag) + " dq   vs blocked", rel(got.dq, blk.dq), tol);
        }
      }
    }
  }
  // Which kernel SDPA picks for what sdpa_attention() passes it (sdp::SDPBackend: -1 error,
  // 0 math, 1 flash, 2 memory-efficient, 3 cuDNN). On CUDA, bf16 at T = 4096, hd = 64 must not be
  // math. On the CPU only flash exists besides math; the choice is printed, not required.
  // (Compiled for LibTorch >= 2 only; on 1.13 main() returned above.)
#if TORCH_VERSION_MAJOR >= 2
  {
    const int64_t T = on_cpu ? 1024 : 4096, H = 8;
    const char* names[] = {"math", "flash", "memory-efficient", "cudnn", "overrideable"};
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      auto opts = torch::TensorOptions().dtype(dtype).device(device);
      auto q = torch::randn({1, H, T, 64}, opts), k = torch::randn({1, H, T, 64}, opts);
      for (int64_t window : {int64_t{0}, int64_t{256}}) {
        const int64_t choice =
            window <= 0 ? at::_fused_sdp_choice(q, k, k, {}, 0.0, /*is_causal=*/true)
                        : at::_fused_sdp_choice(q, k, k, causal_window_mask(T, window, device), 0.0, false);
        const bool ok = on_cpu ? choice >= 0 : (dtype != torch::kBFloat16 || choice > 0);
        if (!ok) ++failures;
        std::printf("%s kernel for %s T=%lld window=%-5lld: %s (%lld)\n", ok ? "ok  " : "FAIL",
                    dtype == torch::kBFloat16 ? "bf16" : "fp32", (long long)T, (long long)window,
                    choice >= 0 && choice <= 4 ? names[choice] : "error", (long long)choice);
      }
    }
  }
#endif
  std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
