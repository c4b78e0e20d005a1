// hlp-bench-attention [--threads N] [--lengths 1024,2048,...] [--repeats R] [--only layer|model]
//                     [--naive-budget-gib G] [--versus naive|sdpa]
// Blocked (flash-style) vs naive attention (or, with --versus sdpa, vs LibTorch 2.x's
// scaled_dot_product_attention: its CPU flash kernel), in one run, at each context length T:
//   1. one A layer and one S layer (window 256) of the `small` preset (D 256, 4/2 heads x 64),
//      micro-batch 1: forward + backward of the whole attention module (projections, RoPE,
//      kernel) from x [1, T, 256];
//   2. the `small` model, micro-batch 1, LoRA r8 on q,k,v,o (hlp-train's default): forward,
//      cross-entropy and backward.
// Peak bytes: the counting CPU allocator's high-water mark during the call minus what was live
// before it (parameters and inputs excluded for layers, included for the model). Times: the
// minimum over the repeats, in ms (layers: after one warm-up call; the model: the first repeat
// is the warm-up, a model step at 16k is too long to run an extra time). Naive is skipped where its predicted T x T memory
// (accounting.h attention_memory) exceeds --naive-budget-gib: the line says so.
// Fix the BLAS pool (OPENBLAS_NUM_THREADS=1 with --threads 1): docs/toolchain.md, "OpenBLAS and
// its thread pool".
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "metrics/cpu_allocator_counter.h"
#include "model/accounting.h"
#include "model/attention.h"
#include "model/attention_tiling.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "model/sdpa_attention.h"

using namespace hlp::model;
using hlp::metrics::CpuAllocatorCounter;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Measurement {
  double min_ms = 0;
  int64_t peak_bytes = 0;  // above what was live before the call
};

Measurement measure(const std::function<void()>& fn, int repeats) {
  Measurement m;
  m.min_ms = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const int64_t before = CpuAllocatorCounter::current_bytes();
    CpuAllocatorCounter::reset_peak();
    const double start = hlp::now_s();
    fn();
    m.min_ms = std::min(m.min_ms, (hlp::now_s() - start) * 1e3);
    m.peak_bytes = std::max(m.peak_bytes, CpuAllocatorCounter::peak_bytes() - before);
  }
  return m;
}

// Predicted bytes of the naive T x T part of one attention layer (saved + transient).
int64_t naive_attention_bytes(const ModelConfig& c, int64_t layer, int64_t T) {
  auto naive = c;
  naive.attn_impl = AttnImpl::naive;
  const auto m = attention_memory(naive, layer, T, 1);
  return m.saved_bytes + m.transient_bytes;
}

// The kernel compared with blocked (--versus): naive by default, or sdpa.
AttnImpl g_versus = AttnImpl::naive;

// Over the budget only for naive, whose T x T scores the accounting predicts; sdpa's flash
// kernel is linear in T (its sliding-window mask is a [T, T] bool: 1 byte an entry).
bool versus_over_budget(int64_t predicted_naive_bytes, int64_t budget) {
  return g_versus == AttnImpl::naive && predicted_naive_bytes > budget;
}

void print_row(const char* what, int64_t T, const Measurement& blocked, const Measurement* naive,
               const char* skip_reason) {
  if (naive)
    std::printf("%-8s %7lld %12.1f %12.1f %9.2fx %13.1f %13.1f %9.2fx\n", what, (long long)T,
                blocked.min_ms, naive->min_ms, naive->min_ms / blocked.min_ms,
                blocked.peak_bytes / kMiB, naive->peak_bytes / kMiB,
                double(naive->peak_bytes) / double(blocked.peak_bytes));
  else
    std::printf("%-8s %7lld %12.1f %12s %10s %13.1f %13s %10s  (%s skipped: %s)\n", what,
                (long long)T, blocked.min_ms, "-", "-", blocked.peak_bytes / kMiB, "-", "-",
                to_string(g_versus).c_str(), skip_reason);
}

void print_header(const char* title) {
  std::printf("\n## %s\n", title);
  const std::string v = to_string(g_versus);
  std::printf("%-8s %7s %12s %12s %10s %13s %13s %10s\n", "what", "T", "blocked_ms",
              (v + "_ms").c_str(), "speedup", "blocked_MiB", (v + "_MiB").c_str(), "mem_ratio");
}

void bench_layers(const std::vector<int64_t>& lengths, int repeats, int64_t naive_budget) {
  print_header("one attention layer of `small` (D 256, H 4, KVH 2, hd 64), B 1, forward + "
               "backward; S: window 256");
  auto config = preset("small").with_pattern("AS");
  config.window = 256;
  HybridLM model(config, 1);  // holds one A block (layer 0) and one S block (layer 1)
  for (int64_t T : lengths) {
    for (int64_t layer : {0, 1}) {
      auto attention = model->block(layer)->attention;
      torch::manual_seed(0);
      auto x = torch::randn({1, T, config.hidden}).requires_grad_(true);
      auto run = [&](AttnImpl impl, int times) {
        attention->attn_impl = impl;
        return measure(
            [&] {
              attention->forward(x).sum().backward();
              x.mutable_grad() = torch::Tensor();
              attention->zero_grad(/*set_to_none=*/true);
            },
            times);
      };
      run(AttnImpl::blocked, 1);  // warm-up: first-touch pages, OpenBLAS buffers
      const auto blocked = run(AttnImpl::blocked, repeats);
      const char* what = layer == 0 ? "A" : "S(256)";
      if (versus_over_budget(naive_attention_bytes(config, layer, T), naive_budget)) {
        print_row(what, T, blocked, nullptr, "predicted T x T memory over the budget");
        continue;
      }
      if (g_versus != AttnImpl::naive) run(g_versus, 1);  // its own warm-up
      const auto naive = run(g_versus, repeats);
      print_row(what, T, blocked, &naive, "");
    }
  }
}

void bench_model(const std::vector<int64_t>& lengths, int repeats, int64_t naive_budget) {
  print_header("`small` model (GGGGGGAGGASG, window 256), B 1, LoRA r8 q,k,v,o: forward + "
               "cross-entropy + backward; peak includes the model");
  const auto config = preset("small");
  const auto lora = make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj");
  for (int64_t T : lengths) {
    torch::manual_seed(0);
    auto tokens = torch::randint(config.vocab, {1, T + 1}, torch::kLong);
    auto inputs = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);
    auto run = [&](AttnImpl impl) {
      const int64_t before_model = CpuAllocatorCounter::current_bytes();
      HybridLM model(config, 1);
      apply_lora(model, lora);
      model->set_attn_impl(impl);
      model->train();
      const int64_t model_bytes = CpuAllocatorCounter::current_bytes() - before_model;
      auto m = measure(
          [&] {
            hlp::model::cross_entropy_loss(model->forward(inputs), targets).backward();
            model->zero_grad(/*set_to_none=*/false);
          },
          repeats);
      m.peak_bytes += model_bytes;
      return m;
    };
    const auto blocked = run(AttnImpl::blocked);
    int64_t naive_bytes = 0;
    for (int64_t l = 0; l < config.num_layers(); ++l)
      naive_bytes += config.layer_kind(l) == LayerKind::gated_delta ? 0
                                                                    : naive_attention_bytes(config, l, T);
    if (versus_over_budget(naive_bytes + blocked.peak_bytes, naive_budget)) {
      print_row("small", T, blocked, nullptr, "predicted T x T memory over the budget");
      continue;
    }
    const auto naive = run(g_versus);
    print_row("small", T, blocked, &naive, "");
  }
}

std::vector<int64_t> parse_lengths(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 2;
  double naive_budget_gib = 8.0;
  std::string only;
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192, 16384};
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--threads") == 0 && has_value) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--repeats") == 0 && has_value) repeats = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--lengths") == 0 && has_value) lengths = parse_lengths(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0 && has_value) only = argv[++i];
    else if (std::strcmp(argv[i], "--naive-budget-gib") == 0 && has_value)
      naive_budget_gib = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--versus") == 0 && has_value &&
             (std::strcmp(argv[i + 1], "naive") == 0 || std::strcmp(argv[i + 1], "sdpa") == 0))
      g_versus = parse_attn_impl(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: hlp-bench-attention [--threads N] [--lengths 1024,2048,...] "
                   "[--repeats R] [--only layer|model] [--naive-budget-gib G] [--versus naive|sdpa]\n");
      return 2;
    }
  }
  if (g_versus == AttnImpl::sdpa && !sdpa_available(torch::kCPU)) {
    std::fprintf(stderr, "hlp-bench-attention: --versus sdpa needs LibTorch >= 2.0 (this is %s)\n",
                 TORCH_VERSION);
    return 2;
  }
  CpuAllocatorCounter::install();
  at::set_num_threads(threads);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  std::printf("# hlp-bench-attention: LibTorch %s, intra-op threads %d, OPENBLAS_NUM_THREADS=%s, "
              "repeats %d, blocked vs %s, naive budget %.1f GiB, block %lld\n",
              TORCH_VERSION, threads, blas ? blas : "(unset: pool sized to the machine)", repeats,
              to_string(g_versus).c_str(), naive_budget_gib, (long long)kAttentionBlock);
  const auto budget = static_cast<int64_t>(naive_budget_gib * 1024 * kMiB);
  if (only.empty() || only == "layer") bench_layers(lengths, repeats, budget);
  if (only.empty() || only == "model") bench_model(lengths, repeats, budget);
  return 0;
}
