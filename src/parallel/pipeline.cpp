// PipelineStrategy: building the stage, its gradients and their reductions, and the per-stage
// records. The schedule tables are in pipeline_schedule.cpp, their execution in pipeline_run.cpp.
#include "parallel/pipeline.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/clock.h"
#include "common/error.h"
#include "model/accounting.h"
#include "model/init.h"
#include "model/lora.h"
#include "model/moe.h"
#include "parallel/pipeline_profile.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

PipelineStrategy::PipelineStrategy(const StrategyOptions& options)
    : options_(options), mesh_(options.mesh) {
  if (!mesh_) throw std::logic_error("PipelineStrategy needs StrategyOptions::mesh");
  stage_ = mesh_->coord().pp;
  stages_ = mesh_->shape().pp;
  chunks_ = std::max(1, options_.pp_virtual);
  {  // the registry's pipeline rules (the step checks the real micro-batch count)
    RunFacts facts;
    facts.model = &options_.model;
    facts.pp_schedule = options_.pp_schedule;
    facts.pp_virtual = chunks_;
    if (stages_ > 1) {
      const std::string why = check_axis(MeshAxis::PP, stages_, facts);
      if (!why.empty()) throw UserError(why);
    } else {
      validate_schedule(schedule_spec(1));  // tp without pp: --pp-virtual must stay 1
    }
  }
  check_message_order();
  const int virtual_stages = stages_ * chunks_;
  const int64_t seq_len = options_.seq_len > 0 ? options_.seq_len : 128;
  split_ = split_stages(options_.model, options_.lora, seq_len, virtual_stages, options_.pp_split);
  if (options_.pp_split == "profiled")  // re-split on measured costs (collective over world)
    split_ = split_on_costs(profile_layer_costs(options_.model, options_.lora, seq_len,
                                                options_.seed, *mesh_->world_comm(),
                                                options_.device),
                            virtual_stages, "profiled");
  const int64_t L = options_.model.num_layers();
  // Only this stage's chunks, as shapes (Values::deferred); then one parameter at a time: its
  // values, this rank's tp slice, and with fsdp2 its dp rows. A rank never holds more than its
  // part plus one whole parameter while the stage is built.
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (int c = 0; c < chunks_; ++c) {
    const size_t g = size_t(c * stages_ + stage_);
    const int64_t first = split_.first_block[g], end = split_.end_block[g];
    model::HybridLM part(rank_model_config(options_), options_.seed, first, end,
                         /*has_embedding=*/first == 0,
                         /*has_head=*/end == L, model::Values::deferred);
    model::apply_lora(part, options_.lora);
    part->train();
    for (auto& named : named_params(*part)) params.push_back(named);
    parts_.push_back(part);
  }
  tp_ = std::make_unique<TensorParallel>(parts_.front()->config(), mesh_->tp_comm(),
                                         options_.lora.dropout);
  const Materialise materialise = [this](const std::string& name, const torch::Tensor& p) {
    // CPU draw, stored in its dtype, then moved
    materialise_on_device(name, p, options_.seed, options_.device, options_.base_dtype);
    tp_->slice(name, p);
  };
  ep_ = expert_axis(options_);
  if (options_.spec().dp_kind() == DpKind::fsdp2) {
    // --ep: the routed experts sharded over their replicas, the rest over dp
    unit_ = per_param_unit_with_experts(params, options_.dp_comm, ep_, materialise);
    for (auto& [name, p] : params)  // sizes survive the unit's free_storage: the tp slice
      working_set_bytes_ += p.numel() * int64_t(p.element_size()) * (p.requires_grad() ? 2 : 1);
  } else
    for (auto& [name, p] : params) materialise(name, p);

  const auto counts = model::count_parameters(options_.model, options_.lora);
  params_total_ = counts.total;
  params_trainable_ = counts.trainable;
  for (const auto& part : parts_) {
    chunk_trainable_.emplace_back();
    for (auto& [name, p] : named_params(*part)) {
      param_bytes_ += p.nbytes();
      param_elements_ += p.numel();
      if (!p.requires_grad()) continue;
      trainable_.emplace_back(name, p);
      chunk_trainable_.back().push_back(p);
    }
  }
  // Tied embeddings: the first stage embeds with the matrix, the last stage multiplies by it;
  // both hold a copy, so a trainable one needs its two gradient halves summed. Decided from the
  // configuration, identically on every pp rank (the split is collective over the pp group).
  const bool sync_embedding =
      stages_ > 1 && options_.model.tied_embeddings &&
      (options_.lora.full_finetune() || options_.lora.saves_parameter("embed_tokens.weight"));
  if (sync_embedding) {
    const bool member = stage_ == 0 || stage_ == stages_ - 1;
    embedding_comm_ = mesh_->pp_comm()->split(member ? 0 : -1, stage_);
  }
  if (unit_) {
    slots_ = unit_->optim_slots();
    for (auto& slot : slots_) {
      const std::string base = slot.name.substr(0, slot.name.find('['));
      if (base == "embed_tokens.weight" && embedding_comm_) embedding_slot_ = int(placement_.size());
      placement_.push_back(tp_placement(base));
    }
    param_bytes_ = unit_->param_bytes();
    param_elements_ = unit_->param_elements();
    grad_bytes_ = unit_->grad_bytes();
  } else {
    allocate_grads();
  }
}

void PipelineStrategy::allocate_grads() {
  // Partial (summed over tp) gradients first, so they are one contiguous prefix of the buffer.
  std::vector<size_t> order;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < trainable_.size(); ++i) {
      const bool partial = tp_->size() > 1 && tp_placement(trainable_[i].first) == TpPlacement::Partial;
      if (partial == (pass == 0)) order.push_back(i);
    }
  // --ep: the routed experts' gradients last, reduced over their replicas instead (expert_numel_)
  if (ep_.active()) {
    std::stable_partition(order.begin(), order.end(), [&](size_t i) {
      return !model::is_routed_expert_param(trainable_[i].first);
    });
    for (size_t i : order)
      if (model::is_routed_expert_param(trainable_[i].first)) expert_numel_ += trainable_[i].second.numel();
  }
  int64_t numel = 0;
  for (auto& [name, p] : trainable_) numel += p.numel();
  flat_grads_ = at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(options_.device));
  int64_t offset = 0;
  for (size_t i : order) {
    auto& [name, p] = trainable_[i];
    at::Tensor g = flat_grads_.narrow(0, offset, p.numel()).view(p.sizes());
    p.mutable_grad() = g;
    const TpPlacement placement = tp_placement(name);
    if (tp_->size() > 1 && placement == TpPlacement::Partial) partial_numel_ = offset + p.numel();
    if (name == "embed_tokens.weight" && embedding_comm_) embedding_slot_ = int(slots_.size());
    slots_.push_back({name, p, g});
    placement_.push_back(placement);
    offset += p.numel();
  }
  grad_bytes_ = flat_grads_.nbytes();
}

void PipelineStrategy::reduce_grads() {
  if (unit_) {  // fsdp2: full gradients from autograd -> tp sum, embedding sum, reduce-scatter
    for (auto& [name, p] : trainable_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      if (tp_->size() > 1 && tp_placement(name) == TpPlacement::Partial)
        mesh_->tp_comm()->all_reduce(p.grad(), comm::ReduceOp::Sum);
      if (name == "embed_tokens.weight" && embedding_comm_)
        embedding_comm_->all_reduce(p.grad(), comm::ReduceOp::Sum);
    }
    unit_->reduce_grads();
    unit_->finish_grads();
    unit_->release();
    finish_expert_grads(slots_, ep_);
    return;
  }
  if (tp_->size() > 1 && partial_numel_ > 0)
    mesh_->tp_comm()->all_reduce(flat_grads_.narrow(0, 0, partial_numel_), comm::ReduceOp::Sum);
  if (embedding_comm_ && embedding_slot_ >= 0)
    embedding_comm_->all_reduce(slots_[size_t(embedding_slot_)].grad, comm::ReduceOp::Sum);
  const int64_t dense = flat_grads_.numel() - expert_numel_;
  if (options_.dp_comm && options_.dp_comm->size() > 1 && dense > 0)
    options_.dp_comm->all_reduce(flat_grads_.narrow(0, 0, dense), comm::ReduceOp::Avg);
  if (expert_numel_ > 0) reduce_expert_grads(flat_grads_.narrow(0, dense, expert_numel_), slots_, ep_);
}

double PipelineStrategy::grad_norm() {
  // Count every element of the whole model once: tp shards on every tp rank, tp-replicated
  // tensors on tp rank 0 only, the tied embedding on the first stage only.
  const bool tp_leader = mesh_->coord().tp == 0;
  double sq = 0.0, expert_sq = 0.0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (placement_[i] != TpPlacement::Sharded && !tp_leader) continue;
    if (int(i) == embedding_slot_ && stage_ == stages_ - 1) continue;
    // --ep without fsdp2: each rank of the expert group holds other experts whole
    (!unit_ && ep_.active() && is_expert_slot(slots_[i]) ? expert_sq : sq) +=
        slots_[i].grad.to(at::kDouble).pow(2).sum().item<double>();
  }
  if (!unit_ && ep_.active()) {
    at::Tensor e = at::full({1}, expert_sq, scalar_options_for(*ep_.group, at::kDouble));
    ep_.group->all_reduce(e, comm::ReduceOp::Sum);
    sq += e.item<double>();
  }
  at::Tensor v = at::full({1}, sq, scalar_options_for(*mesh_->pp_comm(), at::kDouble));
  if (mesh_->shape().tp > 1) mesh_->tp_comm()->all_reduce(v, comm::ReduceOp::Sum);
  if (stages_ > 1) mesh_->pp_comm()->all_reduce(v, comm::ReduceOp::Sum);
  if (unit_ && options_.dp_comm->size() > 1)  // fsdp2: dp ranks hold different shards
    options_.dp_comm->all_reduce(v, comm::ReduceOp::Sum);
  return std::sqrt(v.item<double>());
}

void PipelineStrategy::zero_grad() {
  if (unit_)
    unit_->zero_grad();
  else
    flat_grads_.zero_();
}

std::vector<StageRecord> PipelineStrategy::stage_records() {
  StageRecord mine = first_step_;
  if (measured_steps_ > 0) {
    const double n = double(measured_steps_);
    mine = measured_sum_;
    mine.forward_s /= n;
    mine.backward_s /= n;
    mine.weight_s /= n;
    mine.idle_s /= n;
    mine.wall_s /= n;
    mine.compute_cpu_s /= n;
    for (auto& k : mine.chunks) k = {k.f / n, k.b / n, k.w / n};
  }
  mine.chunks.resize(size_t(chunks_), PipeCosts{0.0, 0.0, 0.0});
  // A stage's blocks: from its first chunk's first to its last chunk's end (with V > 1 the
  // chunks are not adjacent: PipelineInfo::stage_first_layer lists every virtual stage).
  mine.first_block = split_.first_block[size_t(stage_)];
  mine.end_block = split_.end_block[size_t((chunks_ - 1) * stages_ + stage_)];
  mine.predicted_cost = 0.0;
  for (int c = 0; c < chunks_; ++c)
    mine.predicted_cost += split_.stage_cost[size_t(c * stages_ + stage_)];
  const int64_t kFields = 9 + 3 * chunks_;
  std::vector<double> fields{double(mine.first_block), double(mine.end_block),
                             mine.predicted_cost, mine.forward_s, mine.backward_s,
                             mine.weight_s, mine.idle_s, mine.wall_s, mine.compute_cpu_s};
  for (const auto& k : mine.chunks) fields.insert(fields.end(), {k.f, k.b, k.w});
  at::Tensor local = at::tensor(fields, at::kDouble)
                         .to(scalar_options_for(*mesh_->pp_comm(), at::kDouble).device());
  at::Tensor all = at::zeros({stages_ * kFields}, scalar_options_for(*mesh_->pp_comm(), at::kDouble));
  if (stages_ > 1)
    mesh_->pp_comm()->all_gather(local, all);
  else
    all.copy_(local);
  all = to_host(all);
  std::vector<StageRecord> out(static_cast<size_t>(stages_));
  auto a = all.accessor<double, 1>();
  for (int s = 0; s < stages_; ++s) {
    const int64_t o = s * kFields;
    out[size_t(s)] = {int64_t(a[o]), int64_t(a[o + 1]), a[o + 2], a[o + 3], a[o + 4], a[o + 5],
                      a[o + 6], a[o + 7], a[o + 8], {}};
    for (int k = 0; k < chunks_; ++k)
      out[size_t(s)].chunks.push_back(
          {a[o + 9 + 3 * k], a[o + 10 + 3 * k], a[o + 11 + 3 * k]});
  }
  return out;
}

metrics::PipelineInfo PipelineStrategy::pipeline_info() {
  const auto records = stage_records();
  metrics::PipelineInfo info;
  double bubble_sum = 0.0, f = 0.0, b = 0.0, w = 0.0;
  for (const auto& r : records) {
    info.stage_cost.push_back(r.predicted_cost);
    info.stage_cost_measured_s.push_back(r.forward_s + r.backward_s);
    info.stage_cpu_measured_s.push_back(r.compute_cpu_s);
    bubble_sum += r.bubble_fraction();
    f += r.forward_s;
    b += r.backward_s - r.weight_s;
    w += r.weight_s;
  }
  info.stage_first_layer = split_.first_block;  // [p V]: every virtual stage
  const int M = int(last_micro_batches_);
  info.bubble_fraction = bubble_sum / double(stages_);
  // The schedule's own theory at the measured mean F, B and W of a micro-batch through a stage
  // (only zero bubble's depends on them; the others are (p - 1) / V / ((p - 1) / V + M)).
  info.bubble_fraction_theory =
      M > 0 ? bubble_theory(schedule_spec(M), f / M, b / M, w / M) : 0.0;
  // The same table on the ideal clock at this run's own per-chunk costs: what the schedule
  // gives with the stages and chunks as (un)balanced as they were, without message latency.
  if (M > 0) {
    std::vector<PipeCosts> costs(size_t(stages_ * chunks_));
    for (int s = 0; s < stages_; ++s)
      for (int k = 0; k < chunks_; ++k) {
        const PipeCosts& sum = records[size_t(s)].chunks[size_t(k)];
        costs[size_t(k * stages_ + s)] = {sum.f / M, sum.b / M, sum.w / M};
      }
    info.bubble_fraction_simulated = simulate(schedule_spec(M), costs).bubble_fraction();
  }
  info.schedule = to_string(options_.pp_schedule);
  info.virtual_chunks = chunks_;
  info.split = split_.method;
  info.micro_batches = last_micro_batches_;
  return info;
}

void PipelineStrategy::record_step(double forward_s, double backward_s, double weight_s,
                                   double wall_s, double compute_cpu_s) {
  StageRecord r;
  r.forward_s = forward_s;
  r.backward_s = backward_s;
  r.weight_s = weight_s;
  r.wall_s = wall_s;
  r.compute_cpu_s = compute_cpu_s;
  r.idle_s = std::max(0.0, wall_s - forward_s - backward_s);
  r.chunks = chunk_step_;
  if (steps_run_++ == 0) {
    first_step_ = r;
    return;
  }
  measured_sum_.forward_s += r.forward_s;
  measured_sum_.backward_s += r.backward_s;
  measured_sum_.weight_s += r.weight_s;
  measured_sum_.idle_s += r.idle_s;
  measured_sum_.wall_s += r.wall_s;
  measured_sum_.compute_cpu_s += r.compute_cpu_s;
  measured_sum_.chunks.resize(chunk_step_.size(), PipeCosts{0.0, 0.0, 0.0});
  for (size_t k = 0; k < chunk_step_.size(); ++k) {
    measured_sum_.chunks[k].f += chunk_step_[k].f;
    measured_sum_.chunks[k].b += chunk_step_[k].b;
    measured_sum_.chunks[k].w += chunk_step_[k].w;
  }
  ++measured_steps_;
}

std::vector<model::hf::HeldTensor> PipelineStrategy::held_tensors() {
  const bool dp_primary = options_.dp_comm->rank() == 0;
  // This stage's parameters (TP slices), or their FSDP2 rows (disjoint over dp).
  std::vector<model::hf::HeldTensor> held;
  if (unit_) {
    held = unit_->held_tensors();
  } else {
    for (const auto& part : parts_) {
      auto mine = whole_held_tensors(*part, dp_primary, ep_);
      held.insert(held.end(), mine.begin(), mine.end());
    }
  }
  const bool embeds = parts_.front()->has_embedding();
  const int tp = tp_->size(), t = tp_->comm().rank();
  std::vector<model::hf::HeldTensor> out;
  for (auto& h : held) {
    // Tied embeddings: the last stage's copy of the matrix is the LM head, a replica.
    if (h.name == "embed_tokens.weight" && !embeds) h.primary = false;
    const int64_t dim = tp > 1 ? tp_split_dim(h.name) : -1;
    if (dim < 0) {
      if (t != 0) h.primary = false;  // replicated over tp
      out.push_back(h);
      continue;
    }
    // The TP slice is one run of the whole tensor on `dim` (the t-th of tp equal pieces) or one
    // run per block (tp_segments); this rank's region of the slice (all of it, or its FSDP2
    // rows) becomes one HeldTensor per run it meets, `local` narrowed to that run's rows.
    const size_t d = size_t(dim);
    const int64_t slice = h.full_shape[d], begin = h.region.begin[d], end = begin + h.region.size[d];
    h.full_shape[d] = slice * tp;
    for (const TpSegment& s : tp_segments(h.name, options_.model, slice * tp, tp, t)) {
      const int64_t lo = std::max(begin, s.local_begin), hi = std::min(end, s.local_begin + s.length);
      if (lo >= hi) continue;
      model::hf::HeldTensor piece = h;
      piece.local = h.local.narrow(dim, lo - begin, hi - lo);
      piece.region.begin[d] = s.whole_begin + (lo - s.local_begin);
      piece.region.size[d] = hi - lo;
      out.push_back(piece);
    }
  }
  return out;
}

}  // namespace hlp::parallel
