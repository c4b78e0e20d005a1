#include "parallel/pipeline_profile.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "common/clock.h"
#include "model/accounting.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"

namespace hlp::parallel {

namespace {

// Median seconds of forward + backward of block `layer` alone on x [1, T, D].
double time_block(const model::ModelConfig& config, const model::LoraConfig& lora,
                  int64_t layer, int64_t seq_len, uint64_t seed, const torch::Device& device) {
  model::HybridLM part(config, seed, layer, layer + 1, /*has_embedding=*/false, /*has_head=*/false);
  model::apply_lora(part, lora);
  part->to(device);
  part->train();
  torch::Tensor x = torch::randn({1, seq_len, config.hidden}).to(device);
  std::vector<double> times;
  for (int rep = 0; rep < 4; ++rep) {
    torch::Tensor in = x.clone().requires_grad_(true);
    const double t0 = now_s();
    part->forward_blocks(in).sum().backward();
    if (!device.is_cpu()) in.grad().sum().item<float>();  // wait for the device's kernels
    if (rep > 0) times.push_back(now_s() - t0);  // rep 0 warms up
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

std::vector<double> profile_layer_costs(const model::ModelConfig& config,
                                        const model::LoraConfig& lora, int64_t seq_len,
                                        uint64_t seed, comm::Communicator& world,
                                        const c10::Device& device) {
  const int64_t L = config.num_layers();
  const std::vector<double> modelled = model::layer_costs(config, lora, seq_len);
  // One measurement per layer kind (first layer of that letter), averaged over the world.
  std::map<char, double> seconds;
  for (int64_t i = 0; i < L; ++i)
    if (!seconds.count(config.pattern[size_t(i)]))
      seconds[config.pattern[size_t(i)]] = time_block(config, lora, i, seq_len, seed, device);
  at::Tensor v = at::zeros({int64_t(seconds.size())}, at::kDouble);
  int64_t k = 0;
  for (auto& [kind, s] : seconds) v[k++] = s;
  v = v.to(world.scalar_device());
  world.all_reduce(v, comm::ReduceOp::Avg);
  v = v.to(at::kCPU);
  k = 0;
  for (auto& [kind, s] : seconds) s = v[k++].item<double>();

  std::vector<double> costs(size_t(L + 2), 0.0);
  double measured_sum = 0.0, modelled_sum = 0.0;
  for (int64_t i = 0; i < L; ++i) {
    costs[size_t(i + 1)] = seconds[config.pattern[size_t(i)]];
    measured_sum += costs[size_t(i + 1)];
    modelled_sum += modelled[size_t(i + 1)];
  }
  const double seconds_per_unit = modelled_sum > 0 ? measured_sum / modelled_sum : 0.0;
  costs.front() = modelled.front() * seconds_per_unit;
  costs.back() = modelled.back() * seconds_per_unit;
  return costs;
}

}  // namespace hlp::parallel
