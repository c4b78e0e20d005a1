#include "parallel/strategy_util.h"

#include <ATen/autocast_mode.h>

#include "common/clock.h"
#include "model/lora.h"

namespace hlp::parallel {

model::HybridLM build_model(const StrategyOptions& options, model::Values values) {
  model::HybridLM lm(options.model, options.seed, values);
  model::apply_lora(lm, options.lora);
  lm->train();
  return lm;
}

void wait_for(const comm::WorkPtr& work) {
  if (work) work->wait();
}

namespace {
double blocked_s() {
  const auto b = comm::this_thread_blocked();
  return b.collective_s + b.p2p_s;
}
}  // namespace

ComputeTimer::ComputeTimer(double& seconds)
    : seconds_(seconds), start_s_(now_s()), blocked_start_s_(blocked_s()) {}

ComputeTimer::~ComputeTimer() {
  seconds_ += (now_s() - start_s_) - (blocked_s() - blocked_start_s_);
}

double dp_mean(comm::Communicator* dp_comm, double local_mean) {
  if (!dp_comm || dp_comm->size() == 1) return local_mean;
  at::Tensor v = at::full({1}, local_mean, at::kDouble);
  dp_comm->all_reduce(v, comm::ReduceOp::Avg);
  return v.item<double>();
}

double local_grad_sq(const std::vector<OptimSlot>& slots) {
  double sum = 0.0;
  for (const auto& s : slots)
    if (s.grad.numel() > 0) sum += s.grad.to(at::kDouble).pow(2).sum().item<double>();
  return sum;
}

AutocastScope::AutocastScope(bool bf16) : active_(bf16) {
  if (!active_) return;
  previous_enabled_ = at::autocast::is_cpu_enabled();
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  at::autocast::set_cpu_enabled(previous_enabled_);
  at::autocast::clear_cache();
}

std::vector<std::pair<std::string, torch::Tensor>> named_params(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : m.named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  return out;
}

int64_t numel_of(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                 bool trainable_only) {
  int64_t n = 0;
  for (const auto& [name, p] : params)
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

std::vector<model::hf::HeldTensor> whole_held_tensors(const torch::nn::Module& m, bool primary) {
  std::vector<model::hf::HeldTensor> out;
  for (auto& [name, p] : named_params(m)) {
    model::hf::HeldTensor h;
    h.name = name;
    h.local = p.detach();
    h.full_shape = p.sizes().vec();
    h.region = model::hf::Region::whole(h.full_shape);
    h.primary = primary;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace hlp::parallel
