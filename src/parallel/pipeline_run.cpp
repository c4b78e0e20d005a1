// Executing a pipeline schedule table (pipeline_schedule.h) on this stage: the forward, the
// backward (fused BW, or zero bubble's B and W) of one micro-batch through one model chunk, and
// the step around them.
//
// Between virtual stages: the activation x [B, T, D] (float32) of micro-batch m goes to virtual
// stage g + 1, its gradient comes back to g; the tags are the table's (message_sent /
// message_needed). Sends are asynchronous (waited at the end of the step), receives block: time
// blocked in them is the stage's idle time.
#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "metrics/recorder.h"
#include "parallel/pipeline.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

namespace {

metrics::Recorder::Span compute_span(metrics::Recorder* rec, const char* name, int64_t step,
                                     int m) {
  return rec ? rec->span(name, metrics::Lane::Compute, step, int32_t(m))
             : metrics::Recorder::Span();
}

}  // namespace

PipeSpec PipelineStrategy::schedule_spec(int micro_batches) const {
  PipeSpec spec;
  spec.schedule = options_.pp_schedule;
  spec.stages = stages_;
  spec.chunks = chunks_;
  spec.micro_batches = micro_batches;
  return spec;
}

void PipelineStrategy::check_message_order() const {
  // NCCL matches point-to-point messages between a pair of ranks in issue order (no tags):
  // every pair of stages must then send in the order its receiver posts. The MPI backend
  // matches by tag and runs every table.
  if (std::string(mesh_->pp_comm()->backend_name()) != "nccl") return;
  const PipeSpec spec = schedule_spec(2 * stages_);  // M a multiple of p, as interleaved needs
  for (int from = 0; from < stages_; ++from)
    for (int to = 0; to < stages_; ++to) {
      std::vector<int> sent, needed;
      for (const auto& msg : messages_between(spec, from, to)) sent.push_back(msg.tag);
      for (const auto& a : stage_actions(spec, to)) {
        const PipeMessage msg = message_needed(spec, to, a);
        if (msg.valid && msg.from_stage == from) needed.push_back(msg.tag);
      }
      if (sent != needed)
        throw user_error("--pp-schedule ", to_string(spec.schedule), " with --pp ", stages_,
                         " sends between stages ", from, " and ", to, " in another order than "
                         "they are received, which NCCL (no tags) cannot match; use --comm mpi");
    }
}

void PipelineStrategy::run_schedule(const PipeSpec& spec) {
  for (const PipeAction& a : stage_actions(spec, stage_)) {
    switch (a.op) {
      case PipeOp::F: forward_step(a.chunk, a.micro, /*with_grad=*/true); break;
      case PipeOp::BW: backward_step(a.chunk, a.micro, /*split=*/false); break;
      case PipeOp::B: backward_step(a.chunk, a.micro, /*split=*/true); break;
      case PipeOp::W: weight_step(a.chunk, a.micro); break;
    }
  }
}

void PipelineStrategy::forward_step(int c, int m, bool with_grad) {
  const MicroBatch& mb = (*micro_batches_)[size_t(m)];
  const PipeSpec spec = schedule_spec(int(micro_batches_->size()));
  const PipeAction action{PipeOp::F, c, m};
  InFlight& f = inflight(c, m);
  model::HybridLM& part = parts_[size_t(c)];
  comm::Communicator& pp = *mesh_->pp_comm();
  const int64_t B = mb.inputs.size(0), T = mb.inputs.size(1);
  torch::Tensor x;
  if (const PipeMessage need = message_needed(spec, stage_, action); need.valid) {
    // x: [B, T, D] from the previous virtual stage
    x = torch::empty({B, T, options_.model.hidden},
                     torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
    pp.recv_async(x, need.from_stage, need.tag)->wait();
    if (with_grad) x.requires_grad_(true);
    f.input = x;
  }
  const double cpu0 = thread_cpu_s(), forward0 = times_->forward_s;
  {
    ComputeTimer timer(times_->forward_s);  // tp all-reduces inside are waits, not compute
    auto span = compute_span(options_.recorder, "forward", step_, m);
    AutocastScope autocast(options_.precision);
    if (part->has_embedding()) x = part->embed(mb.inputs);  // [B, T] -> [B, T, D]
    for (int64_t i = 0; i < part->num_blocks(); ++i) x = tp_->block_forward(part->block(i), x);
    if (part->has_head()) {
      // [B, T, D] -> mean loss of this micro-batch (logits [B, T, V] when asked for, or with
      // --loss-impl full)
      torch::Tensor loss;
      if (logits_out_) {
        torch::Tensor logits = part->head(x);
        logits_out_->push_back(logits.detach().to(torch::kFloat));
        loss = model::cross_entropy_loss(logits, mb.targets);
      } else {
        loss = part->loss(x, mb.targets);
      }
      loss_sum_ += loss.item<double>();
      f.output = loss / double(micro_batches_->size());
    } else {
      const PipeMessage msg = message_sent(spec, stage_, action);
      torch::Tensor out = x.detach().to(torch::kFloat).contiguous();
      comm::WorkPtr work = pp.send_async(out, msg.to_stage, msg.tag);
      if (with_grad) {
        f.output_send = std::move(work);
        f.output_sent = out;
      } else {
        sends_.emplace_back(std::move(work), out);  // f is cleared below
      }
      f.output = x;
    }
  }
  compute_cpu_s_ += thread_cpu_s() - cpu0;
  chunk_step_[size_t(c)].f += times_->forward_s - forward0;
  if (!with_grad) f = InFlight{};
}

void PipelineStrategy::backward_step(int c, int m, bool split) {
  const PipeSpec spec = schedule_spec(int(micro_batches_->size()));
  const PipeAction action{split ? PipeOp::B : PipeOp::BW, c, m};
  InFlight& f = inflight(c, m);
  comm::Communicator& pp = *mesh_->pp_comm();
  torch::Tensor grad;  // d loss / d output: [B, T, D] from the next virtual stage
  if (const PipeMessage need = message_needed(spec, stage_, action); need.valid) {
    grad = torch::empty(f.output.sizes(),
                        torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
    pp.recv_async(grad, need.from_stage, need.tag)->wait();
  }
  if (f.output_send) {  // the next stage had this activation before it sent `grad`
    f.output_send->wait();
    f.output_send.reset();
    f.output_sent = torch::Tensor();
  }
  const double cpu0 = thread_cpu_s(), backward0 = times_->backward_s;
  {
    ComputeTimer timer(times_->backward_s);
    auto span = compute_span(options_.recorder, split ? "backward_input" : "backward", step_, m);
    const bool last = parts_[size_t(c)]->has_head();
    torch::Tensor input_grad;  // d loss / d input of this chunk
    if (split) {
      // B: the activation gradients only; the graph and the weight nodes' gradients stay
      // until this micro-batch's W
      const torch::Tensor seed = last ? torch::full_like(f.output, loss_scale())
                                      : grad.to(f.output.scalar_type());
      f.split = std::make_unique<SplitBackward>();
      input_grad = f.split->backward_input(f.output, seed, f.input, chunk_trainable_[size_t(c)]);
    } else {
      if (last)
        backward_scaled(f.output, loss_scale());
      else
        f.output.backward(grad.to(f.output.scalar_type()));
      if (f.input.defined()) input_grad = f.input.grad();
    }
    if (const PipeMessage msg = message_sent(spec, stage_, action); msg.valid) {
      // d loss / d input goes back to the previous virtual stage
      torch::Tensor g = input_grad.to(torch::kFloat).contiguous();
      sends_.emplace_back(pp.send_async(g, msg.to_stage, msg.tag), g);
    }
  }
  compute_cpu_s_ += thread_cpu_s() - cpu0;
  chunk_step_[size_t(c)].b += times_->backward_s - backward0;  // BW: b + w together
  if (split) {
    f.input = torch::Tensor();  // the graph lives on in f.split until W
    f.output = torch::Tensor();
  } else {
    f = InFlight{};  // frees this micro-batch's activations
  }
}

void PipelineStrategy::weight_step(int c, int m) {
  InFlight& f = inflight(c, m);
  if (!f.split || !f.split->pending())
    throw std::logic_error("pipeline: W of chunk " + std::to_string(c) + " micro-batch " +
                           std::to_string(m) + " without its B");
  const double cpu0 = thread_cpu_s();
  double weight_s = 0.0;
  {
    ComputeTimer timer(weight_s);
    auto span = compute_span(options_.recorder, "backward_weight", step_, m);
    f.split->backward_weight();
  }
  times_->backward_s += weight_s;
  weight_s_ += weight_s;
  chunk_step_[size_t(c)].w += weight_s;
  compute_cpu_s_ += thread_cpu_s() - cpu0;
  f = InFlight{};  // frees the graph this micro-batch kept from B
}

void PipelineStrategy::wait_sends() {
  for (auto& [work, tensor] : sends_) work->wait();
  sends_.clear();
}

void PipelineStrategy::check_tp_batches(const std::vector<MicroBatch>& micro_batches) {
  if (batches_checked_ || mesh_->shape().tp == 1) return;
  batches_checked_ = true;
  // Position-weighted sum of all tokens: cheap, and differs for different or reordered batches.
  int64_t hash = 0;
  for (const auto& mb : micro_batches)
    for (const auto& t : {mb.inputs, mb.targets}) {
      auto flat = t.reshape({-1}).to(torch::kLong);
      auto weight = torch::arange(flat.numel(), flat.options()).remainder(1009) + 1;
      hash = hash * 31 + ((flat + 1) * weight).sum().item<int64_t>();
    }
  at::Tensor v = at::tensor({hash, -hash}, at::kLong)
                     .to(scalar_options_for(*mesh_->tp_comm(), at::kLong).device());
  mesh_->tp_comm()->all_reduce(v, comm::ReduceOp::Max);
  if (v[0].item<int64_t>() != hash || -v[1].item<int64_t>() != hash)
    throw user_error("tensor-parallel partners received different batches (rank ",
                     mesh_->world_rank(), " ", mesh_->coord_string(),
                     "); the data loader must give every tp rank the same rows");
}

double PipelineStrategy::forward_backward(const std::vector<MicroBatch>& micro_batches,
                                          int64_t step, PhaseTimes& times) {
  check_tp_batches(micro_batches);
  const int M = int(micro_batches.size());
  const PipeSpec spec = schedule_spec(M);
  validate_schedule(spec);
  micro_batches_ = &micro_batches;
  times_ = &times;
  step_ = step;
  loss_sum_ = 0.0;
  compute_cpu_s_ = 0.0;
  weight_s_ = 0.0;
  chunk_step_.assign(size_t(chunks_), PipeCosts{0.0, 0.0, 0.0});
  last_micro_batches_ = M;
  inflight_.clear();
  inflight_.resize(size_t(chunks_) * size_t(M));
  if (unit_) unit_->wait_gather();  // fsdp2: the stage's full parameters for this step
  const double forward0 = times.forward_s, backward0 = times.backward_s, t0 = now_s();
  run_schedule(spec);
  wait_sends();
  record_step(times.forward_s - forward0, times.backward_s - backward0, weight_s_, now_s() - t0,
              compute_cpu_s_);
  reduce_grads();
  inflight_.clear();
  micro_batches_ = nullptr;
  times_ = nullptr;

  at::Tensor loss = at::full({1}, loss_sum_ / double(M),  // valid on the last stage
                             scalar_options_for(*mesh_->pp_comm(), at::kDouble));
  if (stages_ > 1) mesh_->pp_comm()->broadcast(loss, stages_ - 1);
  return dp_mean(options_.dp_comm.get(), loss.item<double>());
}

double PipelineStrategy::eval_loss(const std::vector<MicroBatch>& micro_batches) {
  torch::NoGradGuard no_grad;
  PhaseTimes ignored;
  const int M = int(micro_batches.size());
  micro_batches_ = &micro_batches;
  times_ = &ignored;
  loss_sum_ = 0.0;
  chunk_step_.assign(size_t(chunks_), PipeCosts{0.0, 0.0, 0.0});  // timed, not recorded
  inflight_.clear();
  inflight_.resize(size_t(chunks_) * size_t(M));
  if (unit_) unit_->wait_gather();
  // Forwards only, in the table's order: every F of the schedule, none of its backwards.
  for (const PipeAction& a : stage_actions(schedule_spec(M), stage_))
    if (a.op == PipeOp::F) forward_step(a.chunk, a.micro, /*with_grad=*/false);
  wait_sends();
  if (unit_) unit_->release();
  inflight_.clear();
  micro_batches_ = nullptr;
  times_ = nullptr;
  at::Tensor loss =
      at::full({1}, loss_sum_ / double(M), scalar_options_for(*mesh_->pp_comm(), at::kDouble));
  if (stages_ > 1) mesh_->pp_comm()->broadcast(loss, stages_ - 1);
  return dp_mean(options_.dp_comm.get(), loss.item<double>());
}

torch::Tensor PipelineStrategy::eval_logits(const std::vector<MicroBatch>& micro_batches) {
  std::vector<torch::Tensor> kept;
  logits_out_ = &kept;
  eval_loss(micro_batches);  // the last stage keeps each micro-batch's logits
  logits_out_ = nullptr;
  int64_t rows = 0;
  for (const auto& mb : micro_batches) rows += mb.inputs.size(0);
  const int64_t T = micro_batches.at(0).inputs.size(1);
  torch::Tensor logits = stage_ == stages_ - 1
                             ? torch::cat(kept)
                             : torch::empty({rows, T, options_.model.vocab},
                                            torch::TensorOptions().dtype(torch::kFloat).device(
                                                options_.device));
  if (stages_ > 1) mesh_->pp_comm()->broadcast(logits, stages_ - 1);
  return logits;
}

}  // namespace hlp::parallel
