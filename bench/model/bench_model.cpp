// hlp-bench-model [--quick] [--threads N] [--only accounting|gdn|step|profile|memory|loss|qwen35]
// Issue 18's measurements of the fused CPU kernels (src/model/kernels/) against the op-by-op
// reference, every comparison interleaved (reference, fused, reference, fused, ...) so that both
// see the same drift of a shared machine's load; ratios are of the medians.
// 1. accounting of every preset (config only): parameters, LoRA trainable, FLOPs per token.
// 2. gdn: the Gated DeltaNet chunked core, forward + backward (small's G-layer shapes):
//    reference vs fused with saved / recomputed chunk states; bytes its autograd graph holds.
// 3. step: the `small` training step (forward + backward + AdamW), reference vs fused kernels.
// 4. profile: per-op self time of one LoRA step of `small` (B 4, T 256), both kernel sets; the
//    share in matrix products and the step's distance from the GEMM limit (executed FLOPs at a
//    sgemm rate measured in the same run).
// 5. memory: activation bytes per token of `small` at T = 2048 (LoRA r8 q,k,v,o): what the
//    autograd graph holds after forward, and the peak of forward + backward, for the reference,
//    lean and fused kernels; then per layer kind (one block of each kind of small's pattern)
//    the bytes held per token next to the bytes of the block's input.
// 6. loss: the LM head + cross entropy at the real vocabulary (151,936 ids), T = 4,096:
//    `--loss-impl full` against `chunked`, peak bytes of forward + backward and time.
// Times in milliseconds.
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "metrics/cpu_allocator_counter.h"
#include "model/accounting.h"
#include "model/gated_deltanet.h"
#include "model/gdn_core.h"
#include "model/init.h"
#include "model/hybrid_lm.h"
#include "model/chunked_loss.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/lean_ops.h"
#include "model/lora.h"
#include "op_profile.h"

using namespace hlp::model;
using hlp::metrics::CpuAllocatorCounter;

namespace {

// Wall time and the calling thread's CPU time (with 1 intra-op and 1 BLAS thread all the work
// runs on it): on a shared, oversubscribed machine the CPU time is the steadier of the two.
struct Timing {
  double min_ms, median_ms, cpu_median_ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times each of fns `repeats` times, interleaved (fn0, fn1, ..., fn0, fn1, ...), after one
// warm-up call each.
std::vector<Timing> time_interleaved(const std::vector<std::function<void()>>& fns, int repeats) {
  for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> wall(fns.size()), cpu(fns.size());
  for (int r = 0; r < repeats; ++r)
    for (size_t i = 0; i < fns.size(); ++i) {
      const double start = hlp::now_s(), start_cpu = hlp::thread_cpu_s();
      fns[i]();
      wall[i].push_back((hlp::now_s() - start) * 1e3);
      cpu[i].push_back((hlp::thread_cpu_s() - start_cpu) * 1e3);
    }
  std::vector<Timing> out;
  for (size_t i = 0; i < fns.size(); ++i)
    out.push_back({*std::min_element(wall[i].begin(), wall[i].end()), median(wall[i]), median(cpu[i])});
  return out;
}

const LoraConfig kLoraQkvo = make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj");

void bench_gdn_core(const std::vector<int64_t>& lengths, int repeats) {
  // Shapes of the small preset's G layers: H = 4, dk = 48, dv = 128, batch 1, chunk 64.
  const int64_t B = 1, H = 4, dk = 48, dv = 128, C = 64;
  std::printf("\n## Gated DeltaNet chunked core, forward + backward (B=%lld H=%lld dk=%lld dv=%lld"
              " C=%lld, float32); graph_MiB = bytes the autograd graph holds after forward\n",
              (long long)B, (long long)H, (long long)dk, (long long)dv, (long long)C);
  std::printf("%6s %-22s %9s %9s %9s %10s %9s %9s\n", "T", "core", "min_ms", "med_ms", "cpu_ms",
              "graph_MiB", "speedup", "cpu_x");
  for (int64_t T : lengths) {
    torch::manual_seed(0);
    auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
    auto q = (unit(torch::randn({B, T, H, dk})) / std::sqrt(double(dk))).requires_grad_(true);
    auto k = unit(torch::randn({B, T, H, dk})).requires_grad_(true);
    auto v = torch::randn({B, T, H, dv}).requires_grad_(true);
    auto beta = torch::sigmoid(torch::randn({B, T, H})).requires_grad_(true);
    auto g = (-torch::softplus(torch::randn({B, T, H}))).requires_grad_(true);
    struct Core {
      const char* name;
      std::function<GdnResult()> run;
    };
    const std::vector<Core> cores = {
        {"reference (op by op)", [&] { return gated_delta_rule_chunked(q, k, v, beta, g, {}, C); }},
        {"fused, saved states",
         [&] { return fused::gated_delta_rule_chunked(q, k, v, beta, g, {}, C, fused::GdnStates::save); }},
        {"fused, recomputed", [&] {
           return fused::gated_delta_rule_chunked(q, k, v, beta, g, {}, C, fused::GdnStates::recompute);
         }},
        {"lean, saved states",
         [&] { return lean::gated_delta_rule_chunked(q, k, v, beta, g, {}, C, lean::GdnStates::save); }},
        {"lean, recomputed", [&] {
           return lean::gated_delta_rule_chunked(q, k, v, beta, g, {}, C, lean::GdnStates::recompute);
         }}};
    std::vector<std::function<void()>> fns;
    std::vector<double> graph_mib;
    for (const auto& core : cores) {
      fns.push_back([&] {
        core.run().output.sum().backward();
        for (auto* t : {&q, &k, &v, &beta, &g}) t->mutable_grad() = torch::Tensor();
      });
      const int64_t before = CpuAllocatorCounter::current_bytes();
      auto r = core.run();
      graph_mib.push_back(double(CpuAllocatorCounter::current_bytes() - before) / (1 << 20));
    }
    const auto t = time_interleaved(fns, repeats);
    for (size_t i = 0; i < cores.size(); ++i)
      std::printf("%6lld %-22s %9.1f %9.1f %9.1f %10.2f %8.2fx %8.2fx\n", (long long)T,
                  cores[i].name, t[i].min_ms, t[i].median_ms, t[i].cpu_median_ms, graph_mib[i],
                  t[0].median_ms / t[i].median_ms, t[0].cpu_median_ms / t[i].cpu_median_ms);
  }
}

// One training step of `model` on fixed tokens; returns the step function.
struct StepSetup {
  HybridLM model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Tensor inputs, targets;
  void step() {
    optimizer->zero_grad();
    hlp::model::cross_entropy_loss(model->forward(inputs), targets).backward();
    optimizer->step();
  }
};

std::unique_ptr<StepSetup> make_step(const ModelConfig& config, const LoraConfig& lora,
                                     bool checkpointing, Kernels kernels, int64_t B, int64_t T) {
  auto c = config;
  c.kernels = kernels;
  auto s = std::make_unique<StepSetup>(StepSetup{HybridLM(c, 1), nullptr, {}, {}});
  apply_lora(s->model, lora);
  s->model->set_activation_checkpointing(checkpointing);
  s->model->train();
  s->optimizer = std::make_unique<torch::optim::AdamW>(trainable_parameters(*s->model),
                                                        torch::optim::AdamWOptions(1e-3));
  torch::manual_seed(0);
  auto tokens = torch::randint(c.vocab, {B, T + 1}, torch::kLong);
  s->inputs = tokens.narrow(1, 0, T);
  s->targets = tokens.narrow(1, 1, T);
  return s;
}

void bench_small_step(int64_t B, int64_t T, int repeats) {
  std::printf("\n## small preset training step (forward + backward + AdamW), B=%lld T=%lld, float32,"
              " reference, lean and fused kernels interleaved; GFLOP/s = executed FLOPs (accounting.h) /"
              " median time; x = reference time / this time (wall, CPU)\n",
              (long long)B, (long long)T);
  std::printf("%-34s %-9s %10s %9s %9s %9s %10s %9s %8s %8s\n", "mode", "kernels", "trainable",
              "min_ms", "med_ms", "cpu_ms", "tokens/s", "GFLOP/s", "ref/this", "cpu");
  const auto config = preset("small");
  struct Mode {
    std::string name;
    LoraConfig lora;
    bool checkpointing;
  };
  const std::vector<Mode> modes = {
      {"full finetune", LoraConfig::none(), false},
      {"LoRA r8 q,k,v,o", kLoraQkvo, false},
      {"LoRA r8 all-linear", make_lora_config(8, 16, 0.0, "all-linear"), false},
      {"LoRA r8 q,k,v,o + checkpointing", kLoraQkvo, true},
  };
  const Kernels kinds[] = {Kernels::reference, Kernels::lean, Kernels::fused};
  for (const auto& mode : modes) {
    std::vector<std::unique_ptr<StepSetup>> setups;
    std::vector<std::function<void()>> fns;
    for (auto k : kinds) setups.push_back(make_step(config, mode.lora, mode.checkpointing, k, B, T));
    for (auto& setup : setups) fns.push_back([s = setup.get()] { s->step(); });
    const auto t = time_interleaved(fns, repeats);
    auto cfg = config;
    cfg.activation_checkpointing = mode.checkpointing;
    const auto flops = training_flops_per_token(cfg, mode.lora, T);
    for (size_t i = 0; i < setups.size(); ++i) {
      const double tokens_per_s = double(B * T) / (t[i].median_ms / 1e3);
      std::printf("%-34s %-9s %10lld %9.1f %9.1f %9.1f %10.0f %9.2f %7.2fx %7.2fx\n",
                  mode.name.c_str(), to_string(kinds[i]).c_str(),
                  (long long)count_parameters(config, mode.lora).trainable, t[i].min_ms,
                  t[i].median_ms, t[i].cpu_median_ms, tokens_per_s,
                  flops.executed_per_token * tokens_per_s / 1e9, t[0].median_ms / t[i].median_ms,
                  t[0].cpu_median_ms / t[i].cpu_median_ms);
    }
  }
}

// sgemm rate of this thread: best of 10 at::mm float32 1024^3 by thread CPU time (a shared
// machine's load lengthens wall time, much less the CPU time of the product itself)
double sgemm_flops_per_cpu_s() {
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    const double start = hlp::thread_cpu_s();
    auto c = torch::mm(a, b);
    best = std::min(best, hlp::thread_cpu_s() - start);
  }
  return 2.0 * 1024 * 1024 * 1024 / best;
}

void bench_profile(int64_t B, int64_t T, int top) {
  const auto config = preset("small");
  struct {
    double flops_per_s;
    std::string source;
  } peak{sgemm_flops_per_cpu_s(), "best of 10 at::mm float32 1024^3 by thread CPU time"};
  const auto flops = training_flops_per_token(config, kLoraQkvo, T);
  const double gemm_limit_ms = flops.executed_per_token * double(B * T) / peak.flops_per_s * 1e3;
  std::printf("\n## per-op self time of one small LoRA r8 q,k,v,o step, B=%lld T=%lld (legacy"
              " autograd profiler; profiler overhead included)\n", (long long)B, (long long)T);
  std::printf("# sgemm rate measured now: %.1f GFLOP/s (%s); executed FLOPs of the step %.1f G"
              " -> GEMM limit %.0f ms\n",
              peak.flops_per_s / 1e9, peak.source.c_str(),
              flops.executed_per_token * double(B * T) / 1e9, gemm_limit_ms);
  for (auto kernels : {Kernels::reference, Kernels::fused}) {
    auto s = make_step(config, kLoraQkvo, false, kernels, B, T);
    s->step();  // warm-up
    const double start = hlp::now_s(), start_cpu = hlp::thread_cpu_s();
    s->step();
    const double plain_ms = (hlp::now_s() - start) * 1e3;
    const double plain_cpu_ms = (hlp::thread_cpu_s() - start_cpu) * 1e3;
    const auto p = hlp::bench::profile_ops([&] { s->step(); });
    std::printf("\n### kernels=%s: step %.0f ms unprofiled (%.0f ms thread CPU), %.0f ms in"
                " recorded ops; matrix products %.1f %% of it; GEMM limit / step CPU = %.2f\n",
                to_string(kernels).c_str(), plain_ms, plain_cpu_ms, p.total_ms,
                100 * p.matmul_share, gemm_limit_ms / plain_cpu_ms);
    std::printf("%-44s %10s %8s %7s\n", "op", "self_ms", "calls", "share");
    for (int i = 0; i < top && i < int(p.ops.size()); ++i)
      std::printf("%-44s %10.1f %8lld %6.1f%%\n", p.ops[i].name.substr(0, 44).c_str(),
                  p.ops[i].self_ms, (long long)p.ops[i].calls, 100 * p.ops[i].self_ms / p.total_ms);
  }
}

void bench_memory_per_kind(int64_t T);

// Bytes the autograd graph of `run` holds once it returned (the allocator's count before and
// after), and the peak of run + backward of its (summed) output above the state before.
struct Held {
  int64_t held = 0, peak = 0;
};
Held held_by(const std::function<torch::Tensor()>& run) {
  const int64_t before = CpuAllocatorCounter::current_bytes();
  CpuAllocatorCounter::reset_peak();
  auto out = run();
  Held h;
  h.held = CpuAllocatorCounter::current_bytes() - before;
  out.sum().backward();
  h.peak = CpuAllocatorCounter::peak_bytes() - before;
  return h;
}

void bench_memory(int64_t T) {
  std::printf("\n## activation bytes per token, small, B=1 T=%lld, LoRA r8 q,k,v,o, float32:"
              " held = what the autograd graph (and logits) hold after forward; peak = allocator"
              " peak of forward + backward above the state before\n", (long long)T);
  std::printf("%-10s %14s %14s %14s %14s\n", "kernels", "held_MiB", "held_B/token", "peak_MiB",
              "peak_B/token");
  double held_ref = 0;
  for (auto kernels : {Kernels::reference, Kernels::lean, Kernels::fused}) {
    auto s = make_step(preset("small"), kLoraQkvo, false, kernels, 1, T);
    s->step();  // warm-up: optimizer state exists
    s->optimizer->zero_grad();
    const auto h = held_by([&] {
      return hlp::model::cross_entropy_loss(s->model->forward(s->inputs), s->targets);
    });
    if (kernels == Kernels::reference) held_ref = double(h.held);
    std::printf("%-10s %14.1f %14.0f %14.1f %14.0f   held vs reference %.2fx\n",
                to_string(kernels).c_str(), double(h.held) / (1 << 20), double(h.held) / double(T),
                double(h.peak) / (1 << 20), double(h.peak) / double(T), double(h.held) / held_ref);
  }
  bench_memory_per_kind(T);
}

// One block of each layer kind of small's pattern (a pipeline stage of one layer, LoRA r8 on
// q,k,v,o), x [1, T, D] requiring grad: bytes held after its forward per token, next to the
// bytes of its input x (what "keep only the inputs" would hold).
void bench_memory_per_kind(int64_t T) {
  const auto config = preset("small");
  std::printf("\n## per layer kind (one block: mixer + MLP), T=%lld, float32: held bytes per token"
              " after forward, and held / input bytes (input x = %lld B/token)\n",
              (long long)T, (long long)(config.hidden * 4));
  std::printf("%-6s %-10s %14s %10s\n", "kind", "kernels", "held_B/token", "held/input");
  std::string seen;
  for (int64_t layer = 0; layer < config.num_layers(); ++layer) {
    const char kind = config.pattern[size_t(layer)];
    if (seen.find(kind) != std::string::npos) continue;
    seen += kind;
    for (auto kernels : {Kernels::reference, Kernels::lean, Kernels::fused}) {
      auto c = config;
      c.kernels = kernels;
      HybridLM part(c, 1, layer, layer + 1, /*has_embedding=*/false, /*has_head=*/false);
      apply_lora(part, kLoraQkvo);
      torch::manual_seed(0);
      auto x = torch::randn({1, T, config.hidden}).requires_grad_(true);
      const auto h = held_by([&] { return part->forward_blocks(x); });
      const double per_token = double(h.held) / double(T);
      std::printf("%-6c %-10s %14.0f %9.2fx\n", kind, to_string(kernels).c_str(), per_token,
                  per_token / double(config.hidden * 4));
    }
  }
}

// The LM head + mean cross entropy at jet-nemotron-2b's vocabulary, T = 4096, a frozen fp32
// head matrix [V, D] with D = 256 (the logits' size does not depend on D; a small D keeps the
// run short): peak bytes of forward + backward above the state before, and time, full logits
// against chunks.
void bench_loss(int repeats) {
  const int64_t V = 151936, T = 4096, D = 256;
  std::printf("\n## loss: LM head + cross entropy, V=%lld T=%lld D=%lld float32, frozen head,"
              " hidden states requiring grad; chunked: %lld rows per chunk\n",
              (long long)V, (long long)T, (long long)D, (long long)loss_chunk_rows(V));
  torch::manual_seed(0);
  auto w = torch::randn({V, D}) * 0.02;
  auto h = torch::randn({T, D}).requires_grad_(true);
  auto targets = torch::randint(V, {T}, torch::kLong);
  const std::function<torch::Tensor()> full = [&] {
    return hlp::model::cross_entropy_loss(torch::matmul(h, w.t()), targets);
  };
  const std::function<torch::Tensor()> chunked = [&] { return chunked_linear_cross_entropy(h, w, targets); };
  std::printf("%-8s %12s %12s %10s %10s\n", "loss", "held_MiB", "peak_MiB", "med_ms", "cpu_ms");
  const auto t = time_interleaved({[&] { full().backward(); }, [&] { chunked().backward(); }}, repeats);
  double full_peak = 0;
  int i = 0;
  for (const auto* fn : {&full, &chunked}) {
    h.mutable_grad() = torch::Tensor();
    const auto m = held_by(*fn);
    if (i == 0) full_peak = double(m.peak);
    std::printf("%-8s %12.1f %12.1f %10.0f %10.0f   peak vs full %.3f\n", i == 0 ? "full" : "chunked",
                double(m.held) / (1 << 20), double(m.peak) / (1 << 20), t[size_t(i)].median_ms,
                t[size_t(i)].cpu_median_ms, double(m.peak) / full_peak);
    ++i;
  }
}

void print_accounting(int64_t T) {
  std::printf("\n## accounting (config only), T=%lld, LoRA r8 alpha16 on q,k,v,o\n", (long long)T);
  std::printf("%-18s %14s %14s %10s %16s %16s %8s\n", "preset", "params", "lora_trainable",
              "fraction", "model_flop/tok", "exec_flop/tok", "ratio");
  const auto lora = make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj");
  for (const auto& name : preset_names()) {
    const auto c = preset(name);
    const auto counts = count_parameters(c, lora);
    const auto flops = training_flops_per_token(c, lora, T);
    std::printf("%-18s %14lld %14lld %9.3f%% %16.4g %16.4g %7.2fx\n", name.c_str(),
                (long long)counts.base, (long long)counts.trainable,
                100.0 * counts.trainable / counts.total, flops.model_per_token,
                flops.executed_per_token, flops.model_per_token / flops.executed_per_token);
  }
}

}  // namespace

// 7. qwen35: one Qwen3.5 Gated DeltaNet layer (gdn_variant qwen3_5: in_proj_qkv + conv1d over
//    q|k|v, 4 key heads serving 8 value heads of 128, D 1024), forward + backward of the whole
//    layer (every parameter and the input take gradients), B 1, float32, the reference, lean and
//    fused kernels interleaved. Its peer: bench/model/qwen35_layer_transformers.py runs
//    transformers' own Qwen3_5GatedDeltaNet (the torch path) at the same shapes and threads.
void bench_qwen35_layer(int64_t T, int repeats) {
  ModelConfig c;
  c.pattern = "G";
  c.hidden = 1024;
  c.gdn_variant = GdnVariant::qwen3_5;
  c.gdn_key_heads = 4;
  c.gdn_heads = 8;
  c.gdn_head_dim_k = 128;
  c.gdn_head_dim_v = 128;
  c.gdn_conv_width = 4;
  std::printf("\n## Qwen3.5 Gated DeltaNet layer, forward + backward (all parameters and the "
              "input), B 1, T %lld, D %lld, %lld key / %lld value heads of %lld, float32\n",
              (long long)T, (long long)c.hidden, (long long)c.gdn_key_heads, (long long)c.gdn_heads,
              (long long)c.gdn_head_dim_k);
  std::printf("%-10s %9s %9s %9s %10s\n", "kernels", "min_ms", "med_ms", "cpu_ms", "tokens/s");
  const Kernels kinds[] = {Kernels::reference, Kernels::lean, Kernels::fused};
  std::vector<GatedDeltaNet> layers;
  std::vector<torch::Tensor> inputs;
  std::vector<std::function<void()>> fns;
  for (auto k : kinds) {
    GatedDeltaNet layer(c);
    for (auto& item : layer->named_parameters()) init_parameter(item.key(), item.value(), 7);
    layer->set_kernels(k);
    layers.push_back(layer);
    inputs.push_back(torch::randn({1, T, c.hidden}, torch::Generator(at::detail::createCPUGenerator(11)))
                         .requires_grad_(true));
  }
  for (size_t i = 0; i < layers.size(); ++i)
    fns.push_back([&, i] {
      layers[i]->zero_grad();
      inputs[i].mutable_grad() = torch::Tensor();
      layers[i]->forward(inputs[i]).sum().backward();
    });
  const auto t = time_interleaved(fns, repeats);
  for (size_t i = 0; i < layers.size(); ++i)
    std::printf("%-10s %9.1f %9.1f %9.1f %10.0f\n", to_string(kinds[i]).c_str(), t[i].min_ms,
                t[i].median_ms, t[i].cpu_median_ms, double(T) / (t[i].median_ms / 1e3));
}

int main(int argc, char** argv) {
  bool quick = false;
  int threads = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: hlp-bench-model [--quick] [--threads N] [--only accounting|gdn|step|profile|memory|loss|qwen35]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered: progress shows in logs
  std::printf("# hlp-bench-model: intra-op threads %d%s\n", threads, quick ? " (quick)" : "");
  CpuAllocatorCounter::install();
  if (only.empty() || only == "accounting") print_accounting(4096);
  if (only.empty() || only == "gdn")
    bench_gdn_core(quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 2048}, quick ? 2 : 7);
  if (only.empty() || only == "step") bench_small_step(quick ? 2 : 4, quick ? 128 : 256, quick ? 2 : 5);
  if (only.empty() || only == "profile") bench_profile(quick ? 2 : 4, quick ? 128 : 256, quick ? 12 : 25);
  if (only.empty() || only == "memory") bench_memory(quick ? 512 : 2048);
  if (only.empty() || only == "loss") bench_loss(quick ? 1 : 3);
  if (only.empty() || only == "qwen35") bench_qwen35_layer(quick ? 512 : 2048, quick ? 2 : 5);
  std::fflush(stdout);
  return 0;
}
