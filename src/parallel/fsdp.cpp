#include "parallel/fsdp.h"

#include "common/clock.h"
#include "metrics/recorder.h"
#include "model/accounting.h"
#include "model/init.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {
namespace {

// Wraps one block: forward gathers, computes with its own inner graph, frees; backward
// re-gathers, runs the inner graph's backward (parameter gradients land in the unit's
// buffers), starts the reduce-scatter, frees.
struct ShardedBlockFunction : public torch::autograd::Function<ShardedBlockFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor anchor, ShardedStrategy* strategy, int64_t block) {
    torch::AutoGradMode enable_grad(true);
    torch::Tensor x_in = x.detach().requires_grad_(x.requires_grad());
    torch::Tensor y = strategy->block_forward(block, x_in);
    ctx->saved_data["x_in"] = x_in;
    ctx->saved_data["y"] = y;
    ctx->saved_data["block"] = block;
    ctx->saved_data["strategy"] = int64_t(reinterpret_cast<intptr_t>(strategy));
    return y.detach();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* strategy =
        reinterpret_cast<ShardedStrategy*>(intptr_t(ctx->saved_data["strategy"].toInt()));
    const int64_t block = ctx->saved_data["block"].toInt();
    torch::Tensor x_in = ctx->saved_data["x_in"].toTensor();
    torch::Tensor y = ctx->saved_data["y"].toTensor();
    strategy->block_backward_begin(block);
    if (y.requires_grad()) torch::autograd::backward({y}, {grad_out[0]});
    strategy->block_backward_end(block);
    torch::Tensor grad_x = x_in.requires_grad() ? x_in.grad() : torch::Tensor();
    // saved_data lives as long as this node, i.e. until the whole graph is freed after
    // backward: without this, every finished block would keep x_in, its gradient [B, T, D] and
    // y alive for the rest of the backward (measured: 8 extra [T, D] fp32 tensors at the peak
    // of small with checkpointing).
    ctx->saved_data.clear();
    return {grad_x, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ShardedStrategy::ShardedStrategy(const StrategyOptions& options, bool per_parameter)
    : options_(options), prefetch_forward_(per_parameter) {
  // Shapes only: each parameter gets its values inside its unit, right before the unit keeps
  // this rank's shard of it, so building never holds the whole model (only the LoRA factors,
  // drawn by apply_lora, have values up front).
  model_ = build_model(options_, model::Values::deferred);
  const uint64_t seed = options_.seed;
  const torch::Device device = options_.device;
  const model::BaseDtype base = options_.base_dtype;
  const Materialise materialise = [seed, device, base](const std::string& name,
                                                       const torch::Tensor& p) {
    materialise_on_device(name, p, seed, device, base);
  };
  auto all = named_params(*model_);
  params_total_ = numel_of(all, false);
  params_trainable_ = numel_of(all, true);
  // Units: root = everything outside blocks.<i>.; then one unit per block.
  std::vector<NamedParams> groups(size_t(model_->num_blocks()) + 1);
  for (auto& [name, p] : all) {
    size_t unit = 0;
    if (name.rfind("blocks.", 0) == 0) unit = std::stoul(name.substr(7)) + 1;
    groups.at(unit).emplace_back(name, p);
  }
  // Working set of a step (sharded_working_set): the units' sizes as the units shard them.
  const int n = options_.dp_comm->size();
  std::vector<UnitSize> sizes;
  for (const auto& g : groups) {
    std::vector<UnitParam> params;
    for (const auto& [name, p] : g)  // as they will be stored (not yet: deferred values)
      params.push_back({p.numel(), p.dim() == 0 ? 1 : p.size(0), p.requires_grad(),
                        model::parameter_element_bytes(p.requires_grad(), p.dim(), base)});
    sizes.push_back(unit_size(params, n, per_parameter));
  }
  working_set_ = sharded_working_set(sizes, n, per_parameter);
  // --ep (fsdp2 only): a block's routed experts, E / ep of them on this rank, are sharded over
  // their replicas rather than over dp, in a unit that gathers and reduces with the block's.
  ep_ = expert_axis(options_);
  for (auto& g : groups)
    units_.push_back(
        per_parameter
            ? per_param_unit_with_experts(std::move(g), options_.dp_comm, ep_, materialise)
            : make_flat_unit(std::move(g), options_.dp_comm, materialise, base));
  for (auto& u : units_)
    for (auto& s : u->optim_slots()) slots_.push_back(s);
  if (ep_.active()) {  // the whole model's counts, every rank's experts included
    const auto counts = model::count_parameters(options_.model, options_.lora);
    params_total_ = counts.total;
    params_trainable_ = counts.trainable;
  }
  anchor_ = torch::zeros({}, torch::TensorOptions().device(options_.device).requires_grad(true));
}

torch::Tensor ShardedStrategy::block_forward(int64_t block, const torch::Tensor& x_in) {
  unit_of_block(block).wait_gather();
  if (prefetch_forward_ && block + 1 < model_->num_blocks()) unit_of_block(block + 1).issue_gather();
  torch::Tensor y = model_->block(block)->forward(x_in);  // [B, T, D]
  unit_of_block(block).release();
  return y;
}

void ShardedStrategy::block_backward_begin(int64_t block) {
  unit_of_block(block).wait_gather();
  if (block > 0) unit_of_block(block - 1).issue_gather();  // backward prefetch
  unit_of_block(block).prepare_grads();
}

void ShardedStrategy::block_backward_end(int64_t block) {
  ShardedUnit& unit = unit_of_block(block);
  unit.reduce_grads();
  unit.release();
  // the previous block's reduce-scatter ran on the comm thread during this block's backward
  if (pending_block_ >= 0) unit_of_block(pending_block_).finish_grads();
  pending_block_ = block;
}

torch::Tensor ShardedStrategy::forward_micro_batch(const MicroBatch& mb) {
  AutocastScope autocast(options_.precision);
  torch::Tensor x = model_->embed(mb.inputs);  // [B, T, D]
  const bool grad = torch::GradMode::is_enabled();
  for (int64_t i = 0; i < model_->num_blocks(); ++i) {
    if (grad) {
      x = ShardedBlockFunction::apply(x, anchor_, this, i);
    } else {
      x = block_forward(i, x);
    }
  }
  return model_->loss(x, mb.targets);  // --loss-impl: chunked, or full logits [B, T, V]
}

double ShardedStrategy::forward_backward(const std::vector<MicroBatch>& micro_batches,
                                         int64_t step, PhaseTimes& times) {
  metrics::Recorder* rec = options_.recorder;
  const double scale = 1.0 / double(micro_batches.size());
  double loss_sum = 0.0;
  root().wait_gather();  // embedding / norm / head stay gathered for the whole step
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    torch::Tensor loss;
    {
      ComputeTimer timer(times.forward_s);
      auto span = rec ? rec->span("forward", metrics::Lane::Compute, step, int32_t(m))
                      : metrics::Recorder::Span();
      loss = forward_micro_batch(micro_batches[m]);
    }
    loss_sum += loss.item<double>();
    {
      ComputeTimer timer(times.backward_s);
      auto span = rec ? rec->span("backward", metrics::Lane::Compute, step, int32_t(m))
                      : metrics::Recorder::Span();
      root().prepare_grads();
      backward_scaled(loss * scale, loss_scale());
      if (pending_block_ >= 0) unit_of_block(pending_block_).finish_grads();
      pending_block_ = -1;
      root().reduce_grads();
      root().finish_grads();
    }
  }
  root().release();
  finish_expert_grads(slots_, ep_);  // averaged over the replicas: / ep
  return dp_mean(options_.dp_comm.get(), loss_sum * scale);
}

double ShardedStrategy::eval_loss(const std::vector<MicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  root().wait_gather();
  double sum = 0.0;
  for (const auto& mb : micro_batches) sum += forward_micro_batch(mb).item<double>();
  root().release();
  return dp_mean(options_.dp_comm.get(), sum / double(micro_batches.size()));
}

torch::Tensor ShardedStrategy::eval_logits(const std::vector<MicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  root().wait_gather();
  std::vector<torch::Tensor> out;
  for (const auto& mb : micro_batches) {
    AutocastScope autocast(options_.precision);
    torch::Tensor x = model_->embed(mb.inputs);                          // [B, T, D]
    for (int64_t i = 0; i < model_->num_blocks(); ++i) x = block_forward(i, x);
    out.push_back(model_->head(x).to(torch::kFloat));                    // [B, T, V]
  }
  root().release();
  return torch::cat(out);
}

double ShardedStrategy::grad_norm() {
  at::Tensor sq =
      at::full({1}, local_grad_sq(slots_), scalar_options_for(*options_.dp_comm, at::kDouble));
  options_.dp_comm->all_reduce(sq, comm::ReduceOp::Sum);
  return std::sqrt(sq.item<double>());
}

void ShardedStrategy::zero_grad() {
  for (auto& u : units_) u->zero_grad();
}

HeldBytes ShardedStrategy::held_bytes() const {
  HeldBytes h;
  for (const auto& u : units_) {
    h.param_bytes += u->param_bytes();
    h.param_elements += u->param_elements();
    h.grad_bytes += u->grad_bytes();
  }
  return h;
}

std::vector<model::hf::HeldTensor> ShardedStrategy::held_tensors() {
  std::vector<model::hf::HeldTensor> out;
  for (auto& u : units_)
    for (auto& h : u->held_tensors()) out.push_back(std::move(h));
  return out;
}

}  // namespace hlp::parallel
