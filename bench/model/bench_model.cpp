// hlp-bench-model [--quick] [--threads N] [--only accounting|gdn|step]
// 1. Gated DeltaNet core, forward + backward: chunked vs recurrent at T = 512 and 2048.
// 2. The `small` preset's training step (forward + backward + AdamW): full finetune vs LoRA.
// 3. Accounting of every preset (config only): parameters, LoRA trainable, FLOPs per token.
// Times in milliseconds: the minimum over the repeats (the least disturbed run on a shared
// machine) and the median; ratios are computed from the minima.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "model/accounting.h"
#include "model/gdn_core.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"

using namespace hlp::model;

namespace {

struct Timing {
  double min_ms, median_ms;
};

Timing time_ms(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const double start = hlp::now_s();
    fn();
    times.push_back((hlp::now_s() - start) * 1e3);
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

void bench_gdn_core(const std::vector<int64_t>& lengths, int repeats) {
  // Shapes of the small preset's G layers: H = 4, dk = 48, dv = 128, batch 1, chunk 64.
  const int64_t B = 1, H = 4, dk = 48, dv = 128;
  std::printf("\n## Gated DeltaNet core, forward + backward (B=%lld H=%lld dk=%lld dv=%lld, float32)\n",
              (long long)B, (long long)H, (long long)dk, (long long)dv);
  std::printf("%8s %12s %12s %14s %14s %10s\n", "T", "chunked_min", "chunked_med",
              "recurrent_min", "recurrent_med", "speedup");
  for (int64_t T : lengths) {
    torch::manual_seed(0);
    auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
    auto q = (unit(torch::randn({B, T, H, dk})) / std::sqrt(double(dk))).requires_grad_(true);
    auto k = unit(torch::randn({B, T, H, dk})).requires_grad_(true);
    auto v = torch::randn({B, T, H, dv}).requires_grad_(true);
    auto beta = torch::sigmoid(torch::randn({B, T, H})).requires_grad_(true);
    auto g = (-torch::softplus(torch::randn({B, T, H}))).requires_grad_(true);
    auto run = [&](bool chunked) {
      auto r = chunked ? gated_delta_rule_chunked(q, k, v, beta, g, {}, 64)
                       : gated_delta_rule_recurrent(q, k, v, beta, g);
      r.output.sum().backward();
      for (auto* t : {&q, &k, &v, &beta, &g}) t->mutable_grad() = torch::Tensor();
    };
    const auto chunked = time_ms([&] { run(true); }, repeats);
    const auto recurrent = time_ms([&] { run(false); }, repeats);
    std::printf("%8lld %12.1f %12.1f %14.1f %14.1f %9.1fx\n", (long long)T, chunked.min_ms,
                chunked.median_ms, recurrent.min_ms, recurrent.median_ms,
                recurrent.min_ms / chunked.min_ms);
  }
}

void bench_small_step(int64_t B, int64_t T, int repeats) {
  std::printf("\n## small preset training step (forward + backward + AdamW), B=%lld T=%lld, float32;"
              " GFLOP/s = executed FLOPs (accounting.h) / min time\n",
              (long long)B, (long long)T);
  std::printf("%-34s %10s %9s %9s %10s %10s %9s\n", "mode", "trainable", "min_ms", "med_ms",
              "tokens/s", "GFLOP/s", "vs_full");
  const auto config = preset("small");
  struct Mode {
    std::string name;
    LoraConfig lora;
    bool checkpointing;
  };
  const std::vector<Mode> modes = {
      {"full finetune", LoraConfig::none(), false},
      {"LoRA r8 q,k,v,o", make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj"), false},
      {"LoRA r8 all-linear", make_lora_config(8, 16, 0.0, "all-linear"), false},
      {"LoRA r8 q,k,v,o + checkpointing", make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj"), true},
  };
  double full_ms = 0;
  for (const auto& mode : modes) {
    HybridLM model(config, 1);
    apply_lora(model, mode.lora);
    model->set_activation_checkpointing(mode.checkpointing);
    model->train();
    torch::optim::AdamW optimizer(trainable_parameters(*model), torch::optim::AdamWOptions(1e-3));
    torch::manual_seed(0);
    auto tokens = torch::randint(config.vocab, {B, T + 1}, torch::kLong);
    auto inputs = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);
    const auto timing = time_ms(
        [&] {
          optimizer.zero_grad();
          hlp::model::cross_entropy_loss(model->forward(inputs), targets).backward();
          optimizer.step();
        },
        repeats);
    auto cfg = config;
    cfg.activation_checkpointing = mode.checkpointing;
    const auto flops = training_flops_per_token(cfg, mode.lora, T);
    const double ms = timing.min_ms;
    const double tokens_per_s = double(B * T) / (ms / 1e3);
    if (full_ms == 0) full_ms = ms;
    std::printf("%-34s %10lld %9.1f %9.1f %10.0f %10.2f %8.2fx\n", mode.name.c_str(),
                (long long)count_parameters(config, mode.lora).trainable, ms, timing.median_ms,
                tokens_per_s, flops.executed_per_token * tokens_per_s / 1e9, full_ms / ms);
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

int main(int argc, char** argv) {
  bool quick = false;
  int threads = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: hlp-bench-model [--quick] [--threads N] [--only accounting|gdn|step]\n");
      return 2;
    }
  }
  at::set_num_threads(threads);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered: progress shows in logs
  std::printf("# hlp-bench-model: intra-op threads %d%s\n", threads, quick ? " (quick)" : "");
  if (only.empty() || only == "accounting") print_accounting(4096);
  if (only.empty() || only == "gdn")
    bench_gdn_core(quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 2048}, quick ? 1 : 5);
  if (only.empty() || only == "step") bench_small_step(quick ? 2 : 4, quick ? 128 : 256, quick ? 2 : 5);
  std::fflush(stdout);
  return 0;
}
