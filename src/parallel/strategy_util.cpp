#include "parallel/strategy_util.h"

#include "model/autocast_state.h"
#include <torch/version.h>

#include "common/clock.h"
#include "model/init.h"
#include "model/lora.h"
#include "model/moe.h"
#include "parallel/mesh.h"
#if defined(HLP_HAVE_CUDA)
#include "comm/cuda_timing.h"
#endif

namespace hlp::parallel {

model::HybridLM build_model(const StrategyOptions& options, model::Values values) {
  // Shapes first; then, for drawn values, one parameter at a time: drawn on the CPU generator
  // (bit-identical to a model built with drawn values), stored in its dtype, moved to the
  // device. Building never holds the model in float32 beside its bf16 storage: at most one
  // whole parameter more. Deferred values: the strategy materialises them (its units, stages).
  model::HybridLM lm(rank_model_config(options), options.seed, model::Values::deferred);
  model::apply_lora(lm, options.lora);
  if (values == model::Values::drawn)
    for (auto& [name, p] : named_params(*lm))
      materialise_on_device(name, p, options.seed, options.device, options.base_dtype);
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
#if defined(HLP_HAVE_CUDA)
  // CUDA runs: the phase ends when its kernels have run, and the compute stream's waits for
  // the communication streams are settled into blocked_s() (comm/cuda_timing.h). CPU: no-op.
  comm::synchronize_timed_device();
#endif
  seconds_ += (now_s() - start_s_) - (blocked_s() - blocked_start_s_);
}

double dp_mean(comm::Communicator* dp_comm, double local_mean) {
  if (!dp_comm || dp_comm->size() == 1) return local_mean;
  at::Tensor v = at::full({1}, local_mean, scalar_options_for(*dp_comm, at::kDouble));
  dp_comm->all_reduce(v, comm::ReduceOp::Avg);
  return v.item<double>();
}

double local_grad_sq(const std::vector<OptimSlot>& slots) {
  // Summed on the gradients' device in float64, in slot order (the same additions as a host
  // loop, so CPU results are unchanged), with one host read at the end instead of one per slot.
  at::Tensor sum;
  for (const auto& s : slots) {
    if (s.grad.numel() == 0) continue;
    at::Tensor sq = s.grad.to(at::kDouble).pow(2).sum();
    sum = sum.defined() ? sum + sq : sq;
  }
  return sum.defined() ? sum.item<double>() : 0.0;
}

void materialise_on_device(const std::string& name, const torch::Tensor& param, uint64_t seed,
                           const torch::Device& device, model::BaseDtype base) {
  model::materialise_parameter(name, param, seed);  // CPU generator, as with Values::drawn
  model::store_parameter(param, base);               // then its storage dtype, on the CPU
  if (param.device() != device) param.set_data(param.detach().to(device));
}

at::TensorOptions scalar_options_for(const comm::Communicator& comm, at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(comm.scalar_device());
}

at::Tensor to_host(const at::Tensor& t) { return t.device().is_cpu() ? t : t.to(at::kCPU); }

AutocastScope::AutocastScope(model::Precision precision)
    : cpu_autocast_(precision == model::Precision::bf16),
      cuda_autocast_(precision != model::Precision::fp32 && at::hasCUDA()),
      half_emulation_(precision == model::Precision::fp16) {
  if (cuda_autocast_) {
    previous_cuda_enabled_ = model::autocast_enabled(at::kCUDA);
    previous_cuda_dtype_ = model::autocast_dtype(at::kCUDA);
    model::set_autocast(at::kCUDA, true, model::autocast_dtype(precision));  // kBFloat16 or kHalf
  }
  if (!cpu_autocast_) return;
  previous_enabled_ = model::autocast_enabled(at::kCPU);
  previous_cpu_dtype_ = model::autocast_dtype(at::kCPU);
  model::set_autocast(at::kCPU, true, at::kBFloat16);
}

AutocastScope::~AutocastScope() {
  if (cuda_autocast_) model::set_autocast(at::kCUDA, previous_cuda_enabled_, previous_cuda_dtype_);
  if (!cpu_autocast_ && !cuda_autocast_) return;
  if (cpu_autocast_) model::set_autocast(at::kCPU, previous_enabled_, previous_cpu_dtype_);
  at::autocast::clear_cache();
}

void backward_scaled(const torch::Tensor& loss, double loss_scale) {
  if (loss_scale == 1.0) {
    loss.backward();  // fp32 / bf16: exactly as before loss scaling existed
  } else {
    loss.backward(torch::full_like(loss, loss_scale));
  }
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

ExpertAxis expert_axis(const StrategyOptions& options) {
  ExpertAxis a;
  if (!options.mesh || options.mesh->shape().ep < 2) return a;
  a.ep = options.mesh->shape().ep;
  a.group = options.mesh->ep_comm();
  a.replicas = options.mesh->ep_replica_comm();
  return a;
}

model::ModelConfig rank_model_config(const StrategyOptions& options) {
  model::ModelConfig c = options.model;
  if (options.mesh && options.mesh->shape().ep > 1) {
    c.moe_ep = options.mesh->shape().ep;
    c.moe_ep_rank = options.mesh->coord().ep;
  }
  return c;
}

bool is_expert_slot(const OptimSlot& slot) { return model::is_routed_expert_param(slot.name); }

double grad_sq_with_experts(const std::vector<OptimSlot>& slots, const ExpertAxis& ep) {
  if (!ep.active()) return local_grad_sq(slots);
  std::vector<OptimSlot> dense, experts;
  for (const auto& s : slots) (is_expert_slot(s) ? experts : dense).push_back(s);
  at::Tensor v = at::full({1}, local_grad_sq(experts), scalar_options_for(*ep.group, at::kDouble));
  ep.group->all_reduce(v, comm::ReduceOp::Sum);
  return local_grad_sq(dense) + v.item<double>();
}

void finish_expert_grads(const std::vector<OptimSlot>& slots, const ExpertAxis& ep) {
  if (!ep.active()) return;
  for (const auto& s : slots)
    if (is_expert_slot(s)) s.grad.mul_(1.0 / double(ep.ep));
}

std::unique_ptr<ShardedUnit> per_param_unit_with_experts(NamedParams params,
                                                         std::shared_ptr<comm::Communicator> dp,
                                                         const ExpertAxis& ep,
                                                         const Materialise& materialise) {
  NamedParams rest, experts;
  for (auto& named : params)
    (ep.active() && model::is_routed_expert_param(named.first) ? experts : rest).push_back(named);
  auto unit = make_per_param_unit(std::move(rest), std::move(dp), materialise);
  if (experts.empty()) return unit;
  return combine_units(std::move(unit),
                       make_per_param_unit(std::move(experts), ep.replicas, materialise));
}

void reduce_expert_grads(const at::Tensor& flat, const std::vector<OptimSlot>& slots,
                         const ExpertAxis& ep) {
  if (ep.replicas->size() > 1) ep.replicas->all_reduce(flat, comm::ReduceOp::Avg);
  finish_expert_grads(slots, ep);
}

std::vector<model::hf::HeldTensor> whole_held_tensors(const torch::nn::Module& m, bool primary,
                                                      const ExpertAxis& ep) {
  auto out = whole_held_tensors(m, primary);
  if (ep.active())
    for (auto& h : out)
      if (model::is_routed_expert_param(h.name)) h.primary = ep.replicas->rank() == 0;
  return out;
}

}  // namespace hlp::parallel
