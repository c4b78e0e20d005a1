// The pipeline schedules as explicit loops (Megatron / picotron style), and the forward and
// backward of one micro-batch on this stage. p stages, M micro-batches, this stage s:
//
//   gpipe:  F0 F1 ... F(M-1)  then  B0 B1 ... B(M-1)
//           holds the activations of all M micro-batches.
//   1f1b:   warm-up   min(p - s - 1, M) forwards
//           steady    M - warm-up times: one forward, one backward
//           cool-down the remaining warm-up backwards
//           holds the activations of at most p - s micro-batches.
// Both idle (p - 1) / (M + p - 1) of the time in theory (REFERENCE §4).
//
// Between stages: the activation x [B, T, D] (float32) of micro-batch m goes to stage s+1 with
// tag 2m, its gradient comes back with tag 2m+1. Sends are asynchronous (waited at the end of
// the step), receives block: time blocked in them is the stage's idle time.
#include "common/clock.h"
#include "common/error.h"
#include "metrics/recorder.h"
#include "parallel/pipeline.h"
#include "parallel/strategy_util.h"

namespace hlp::parallel {

namespace {

int tag_forward(int m) { return 2 * m; }
int tag_backward(int m) { return 2 * m + 1; }

metrics::Recorder::Span compute_span(metrics::Recorder* rec, const char* name, int64_t step,
                                     int m) {
  return rec ? rec->span(name, metrics::Lane::Compute, step, int32_t(m))
             : metrics::Recorder::Span();
}

}  // namespace

void PipelineStrategy::run_gpipe(int M) {
  for (int m = 0; m < M; ++m) forward_step(m, /*with_grad=*/true);
  for (int m = 0; m < M; ++m) backward_step(m);
}

void PipelineStrategy::run_1f1b(int M) {
  const int warmup = std::min(stages_ - stage_ - 1, M);
  const int steady = M - warmup;
  int next_forward = 0, next_backward = 0;
  for (int i = 0; i < warmup; ++i) forward_step(next_forward++, true);  // warm-up
  for (int i = 0; i < steady; ++i) {                                    // steady 1F1B
    forward_step(next_forward++, true);
    backward_step(next_backward++);
  }
  for (int i = 0; i < warmup; ++i) backward_step(next_backward++);  // cool-down
}

void PipelineStrategy::forward_step(int m, bool with_grad) {
  const MicroBatch& mb = (*micro_batches_)[size_t(m)];
  InFlight& f = inflight_[size_t(m)];
  comm::Communicator& pp = *mesh_->pp_comm();
  const int64_t B = mb.inputs.size(0), T = mb.inputs.size(1);
  torch::Tensor x;
  if (stage_ > 0) {  // x: [B, T, D] from the previous stage
    x = torch::empty({B, T, options_.model.hidden},
                     torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
    pp.recv_async(x, stage_ - 1, tag_forward(m))->wait();
    if (with_grad) x.requires_grad_(true);
    f.input = x;
  }
  const double cpu0 = thread_cpu_s();
  {
    ComputeTimer timer(times_->forward_s);  // tp all-reduces inside are waits, not compute
    auto span = compute_span(options_.recorder, "forward", step_, m);
    AutocastScope autocast(options_.precision);
    if (stage_ == 0) x = model_->embed(mb.inputs);  // [B, T] -> [B, T, D]
    for (int64_t i = 0; i < model_->num_blocks(); ++i) x = tp_->block_forward(model_->block(i), x);
    if (stage_ == stages_ - 1) {
      // [B, T, D] -> logits [B, T, V] -> mean loss of this micro-batch
      torch::Tensor logits = model_->head(x);
      if (logits_out_) logits_out_->push_back(logits.detach().to(torch::kFloat));
      torch::Tensor loss = model::cross_entropy_loss(logits, mb.targets);
      loss_sum_ += loss.item<double>();
      f.output = loss / double(micro_batches_->size());
    } else {
      torch::Tensor out = x.detach().to(torch::kFloat).contiguous();
      sends_.emplace_back(pp.send_async(out, stage_ + 1, tag_forward(m)), out);
      f.output = x;
    }
  }
  compute_cpu_s_ += thread_cpu_s() - cpu0;
  if (!with_grad) f = InFlight{};
}

void PipelineStrategy::backward_step(int m) {
  InFlight& f = inflight_[size_t(m)];
  comm::Communicator& pp = *mesh_->pp_comm();
  torch::Tensor grad;  // d loss / d output: [B, T, D] from the next stage
  if (stage_ < stages_ - 1) {
    grad = torch::empty(f.output.sizes(),
                        torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
    pp.recv_async(grad, stage_ + 1, tag_backward(m))->wait();
  }
  const double cpu0 = thread_cpu_s();
  {
    ComputeTimer timer(times_->backward_s);
    auto span = compute_span(options_.recorder, "backward", step_, m);
    if (stage_ == stages_ - 1)
      backward_scaled(f.output, loss_scale());
    else
      f.output.backward(grad.to(f.output.scalar_type()));
    if (stage_ > 0) {  // d loss / d input goes back to the previous stage
      torch::Tensor g = f.input.grad().to(torch::kFloat).contiguous();
      sends_.emplace_back(pp.send_async(g, stage_ - 1, tag_backward(m)), g);
    }
  }
  compute_cpu_s_ += thread_cpu_s() - cpu0;
  f = InFlight{};  // frees this micro-batch's activations
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
  micro_batches_ = &micro_batches;
  times_ = &times;
  step_ = step;
  loss_sum_ = 0.0;
  compute_cpu_s_ = 0.0;
  last_micro_batches_ = M;
  inflight_.assign(size_t(M), InFlight{});
  if (unit_) unit_->wait_gather();  // fsdp2: the stage's full parameters for this step
  const double forward0 = times.forward_s, backward0 = times.backward_s, t0 = now_s();
  if (options_.pp_schedule == "gpipe")
    run_gpipe(M);
  else
    run_1f1b(M);
  wait_sends();
  record_step(times.forward_s - forward0, times.backward_s - backward0, now_s() - t0,
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
  inflight_.assign(size_t(M), InFlight{});
  if (unit_) unit_->wait_gather();
  for (int m = 0; m < M; ++m) forward_step(m, /*with_grad=*/false);
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
