#pragma once
// Model-parallel strategy over the dp x pp x tp mesh: `--strategy pp --pp N`, `--strategy tp
// --tp N`, and `ddp` / `fsdp2` with --pp and/or --tp (make_strategy.cpp; what composes is the
// registry's, registry.h).
//
//   pp axis  each rank builds only its stage's part of the model (HybridLM's part constructor;
//            the split is stage_split.h's), with deferred values: one parameter at a time gets
//            its values, then is cut to its tp slice / fsdp2 rows, before the next one.
//            Activations [B, T, D] go forward and their gradients backward point-to-point
//            between neighbouring stages. Schedules are the generated tables of
//            pipeline_schedule.h (gpipe, 1f1b, interleaved, zb-h1), which pipeline_run.cpp
//            executes action by action. With --pp-virtual V (interleaved) a
//            rank holds V non-adjacent chunks: chunk c of stage s is virtual stage c p + s of
//            the p V-way split, so stage p - 1's chunk c feeds stage 0's chunk c + 1.
//   tp axis  the stage's projections are sliced Megatron-style (tensor_parallel.h).
//   dp axis  after the schedule, gradients are averaged over the dp group with one all-reduce
//            of one flat buffer (DDP semantics without overlap). With --strategy fsdp2 the
//            stage's parameters are instead sharded per parameter on dim 0 over dp as ONE unit
//            (sharded_unit.h's PerParamUnit): all-gathered at the start of the step, released
//            after the step's backward, gradients reduce-scattered once per step (no per-block
//            units and no prefetch: the schedule interleaves micro-batches across blocks).
//
// After backward, in this order: partial tp gradients summed over tp; with tied embeddings and
// a trainable embedding, the embedding gradient summed between the first and the last stage
// (both hold the matrix and apply the same update); then the dp average.
// The loss lives on the last stage; it is broadcast over the pp group.
#include <memory>
#include <string>
#include <vector>

#include "metrics/result_info.h"
#include "model/hybrid_lm.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/sharded_unit.h"
#include "parallel/split_backward.h"
#include "parallel/stage_split.h"
#include "parallel/strategy.h"
#include "parallel/strategy_util.h"
#include "parallel/tensor_parallel.h"

namespace hlp::parallel {

// One stage as measured on its ranks: means per step over the steps after the first
// (all steps if only one ran).
struct StageRecord {
  int64_t first_block = 0, end_block = 0;
  double predicted_cost = 0.0;  // layer_costs units (executed FLOP per token)
  double forward_s = 0.0;       // compute of all forwards of one step
  double backward_s = 0.0;      // compute of all backwards of one step (BW, or B + W)
  double weight_s = 0.0;        // of which the deferred weight-gradient passes W (zb-h1)
  double idle_s = 0.0;          // schedule wall time minus compute (waiting for neighbours)
  double wall_s = 0.0;          // schedule wall time of one step
  double compute_cpu_s = 0.0;   // thread CPU seconds of all forwards + backwards of one step
  std::vector<PipeCosts> chunks;  // [V]: seconds of one step's F, B (BW: b + w) and W per chunk
  double bubble_fraction() const { return wall_s > 0 ? idle_s / wall_s : 0.0; }
};

class PipelineStrategy : public Strategy {
 public:
  explicit PipelineStrategy(const StrategyOptions& options);

  std::string name() const override { return options_.spec().name(); }
  double forward_backward(const std::vector<MicroBatch>& micro_batches, int64_t step,
                          PhaseTimes& times) override;
  double eval_loss(const std::vector<MicroBatch>& micro_batches) override;
  torch::Tensor eval_logits(const std::vector<MicroBatch>& micro_batches) override;
  std::vector<OptimSlot>& optim_slots() override { return slots_; }
  double grad_norm() override;  // collective over tp and pp
  void zero_grad() override;
  HeldBytes held_bytes() const override { return {param_bytes_, grad_bytes_, param_elements_}; }
  // fsdp2 inside a pipeline / tensor-parallel mesh: the stage's parameters are gathered whole
  // for the step, with full-size gradients for the trainable ones until their reduce-scatter.
  WorkingSet working_set() const override {
    WorkingSet ws;
    ws.head = ws.block = double(working_set_bytes_);
    return ws;
  }
  int64_t params_total() const override { return params_total_; }
  int64_t params_trainable() const override { return params_trainable_; }
  std::vector<model::hf::HeldTensor> held_tensors() override;

  // The split over the p V virtual stages: chunk c of stage s is entry c p + s.
  const StageSplit& split() const { return split_; }
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int chunks() const { return chunks_; }
  // The schedule table of this stage for M micro-batches.
  PipeSpec schedule_spec(int micro_batches) const;
  // COLLECTIVE over the pp group: every stage's record, in stage order.
  std::vector<StageRecord> stage_records();
  // COLLECTIVE over the pp group: the result file's /pipeline.
  metrics::PipelineInfo pipeline_info();

 private:
  // One micro-batch m through chunk c of this stage (pipeline_run.cpp).
  void forward_step(int c, int m, bool with_grad);
  void backward_step(int c, int m, bool split);  // BW, or B when split (W deferred)
  void weight_step(int c, int m);                 // W of a B done earlier
  void run_schedule(const PipeSpec& spec);
  void wait_sends();
  void record_step(double forward_s, double backward_s, double weight_s, double wall_s,
                   double compute_cpu_s);
  void check_message_order() const;

  void allocate_grads();
  void reduce_grads();
  void check_tp_batches(const std::vector<MicroBatch>& micro_batches);

  StrategyOptions options_;
  std::shared_ptr<Mesh> mesh_;
  int stage_ = 0, stages_ = 1, chunks_ = 1;
  StageSplit split_;                      // over the stages_ x chunks_ virtual stages
  int64_t working_set_bytes_ = 0;
  std::vector<model::HybridLM> parts_;  // [V]: the model chunk c = virtual stage c p + stage
  std::unique_ptr<TensorParallel> tp_;
  std::unique_ptr<ShardedUnit> unit_;  // fsdp2 over dp (nullptr: replicated over dp)
  std::shared_ptr<comm::Communicator> embedding_comm_;  // {first, last stage} when tied + trainable

  std::vector<std::pair<std::string, torch::Tensor>> trainable_;  // named_parameters order
  std::vector<std::vector<torch::Tensor>> chunk_trainable_;      // [V]: zb-h1's W targets
  std::vector<OptimSlot> slots_;
  std::vector<TpPlacement> placement_;  // per slot
  at::Tensor flat_grads_;               // every slot's grad is a view into it
  int64_t partial_numel_ = 0;           // leading elements of flat_grads_ summed over tp
  ExpertAxis ep_;                       // --ep: E / ep of the routed experts on this rank
  int64_t expert_numel_ = 0;            // trailing elements of flat_grads_: the experts' (ddp)
  int embedding_slot_ = -1;
  int64_t params_total_ = 0, params_trainable_ = 0, param_bytes_ = 0, grad_bytes_ = 0;
  int64_t param_elements_ = 0;
  bool batches_checked_ = false;

  // Per-step state of the schedule.
  struct InFlight {
    torch::Tensor input;   // received activation (requires grad), undefined on virtual stage 0
    torch::Tensor output;  // activation sent on, or the scaled loss on the last virtual stage
    std::unique_ptr<SplitBackward> split;  // zb-h1: the graph and gradients between B and W
    // the send of `output` to the next virtual stage: complete once that stage's gradient for
    // this micro-batch arrived (it had the activation before computing it), waited and freed
    // at this micro-batch's backward rather than at the end of the step
    comm::WorkPtr output_send;
    torch::Tensor output_sent;
  };
  InFlight& inflight(int c, int m) {
    return inflight_[size_t(c) * micro_batches_->size() + size_t(m)];
  }
  const std::vector<MicroBatch>* micro_batches_ = nullptr;
  std::vector<InFlight> inflight_;  // [V x M]
  std::vector<std::pair<comm::WorkPtr, torch::Tensor>> sends_;  // kept alive until waited
  double loss_sum_ = 0.0;
  std::vector<torch::Tensor>* logits_out_ = nullptr;  // eval_logits: last stage keeps logits
  double compute_cpu_s_ = 0.0;  // thread CPU seconds of this step's compute so far
  int64_t step_ = 0;
  PhaseTimes* times_ = nullptr;
  double weight_s_ = 0.0;  // this step's W compute so far
  std::vector<PipeCosts> chunk_step_;  // [V]: this step's F, B and W seconds per chunk

  // Measured per-step sums (steps after the first) for stage_records().
  StageRecord measured_sum_;
  int64_t measured_steps_ = 0, steps_run_ = 0, last_micro_batches_ = 0;
  StageRecord first_step_;
};

}  // namespace hlp::parallel
