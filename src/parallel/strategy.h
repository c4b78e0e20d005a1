#pragma once
// Strategy: how one rank holds its part of the model and turns the micro-batches of a global
// batch into gradients of the global mean loss. Which strategies exist and how they compose is
// the registry's (registry.h); make_strategy.cpp builds one, and one small file per strategy
// implements it (single.cpp, ddp.cpp, fsdp.cpp for flat fsdp and fsdp2, pipeline*.cpp for any
// mesh with pp or tp). The trainer only sees this interface. src/parallel/README.md has the map.
//
// Contract shared by every strategy:
// - forward_backward() runs this rank's micro-batches; afterwards every optim slot's grad holds
//   d(global mean loss)/d(param) for the elements this rank owns, reduced over data parallel;
//   it returns the global mean loss (identical on every rank).
// - Loss scaling (fp16): the backward seeds loss_scale() instead of 1 (backward_scaled() in
//   strategy_util.h), so the grads, and grad_norm(), are loss_scale() times the above; the
//   trainer unscales them in the optimizer step. The returned loss is never scaled.
// - The global mean loss is the mean over all G sequences x T tokens, i.e. the mean of the
//   per-micro-batch means (every micro-batch has the same token count), so any split of the
//   same global batch gives the same loss and gradients up to summation order.
// - held_bytes() reports what the strategy holds persistently, per category, so the recorder
//   can compare the measured peak with the sum of the parts and with theory.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "model/hf/held_tensor.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/precision.h"
#include "parallel/optim_slot.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/registry.h"

namespace hlp::metrics {
class Recorder;
}

namespace hlp::parallel {

class Mesh;

// One micro-batch: inputs and next-token targets, both [B, T] int64.
struct MicroBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// Seconds of one step's phases as seen by the compute thread of this rank.
struct PhaseTimes {
  double forward_s = 0.0;
  double backward_s = 0.0;
  // The two below are filled by the trainer from the communicator's blocked-wait totals
  // (comm::this_thread_blocked()); strategies never time waits themselves, and forward_s /
  // backward_s leave the waits out (ComputeTimer).
  double comm_exposed_s = 0.0;   // blocked in collectives (communication not hidden by compute)
  double pipeline_wait_s = 0.0;  // blocked in point-to-point: waiting for a neighbour stage
};

// Persistent bytes per category on this rank (optimizer state comes from the optimizer).
struct HeldBytes {
  int64_t param_bytes = 0;  // parameters: full replicas, shards, or both (as stored)
  int64_t grad_bytes = 0;   // gradient buffers that live across steps
  int64_t param_elements = 0;  // the parameter elements behind param_bytes
};

struct StrategyOptions {
  StrategyKind strategy = StrategyKind::single;     // the model-parallel sizes are the mesh's
  model::ModelConfig model;
  model::LoraConfig lora;
  uint64_t seed = 0;
  // Where the model, its gradients and every step tensor live. Weights are drawn on the CPU
  // generator and then moved, so the same seed gives the same weights on every device.
  torch::Device device{torch::kCPU};
  model::Precision precision = model::Precision::fp32;  // compute; master weights fp32
  // Storage of frozen weight matrices (model/precision.h; resolved, never automatic).
  model::BaseDtype base_dtype = model::BaseDtype::fp32;
  double bucket_mb = 25.0;                          // ddp
  std::shared_ptr<comm::Communicator> dp_comm;      // data-parallel group (the mesh's dp axis)
  // Model parallelism (pipeline.h, tensor_parallel.h): used when mesh pp or tp > 1.
  std::shared_ptr<Mesh> mesh;                       // nullptr = dp only
  std::string pp_split = "balanced";                // uniform | params | balanced | L0,L1,...
  PipeSchedule pp_schedule = PipeSchedule::one_f_one_b;
  int pp_virtual = 1;                               // V: model chunks per stage (interleaved)
  int64_t seq_len = 0;                              // T (cost model of the balanced split)
  metrics::Recorder* recorder = nullptr;            // optional: spans for the trace

  // The strategy with the mesh's pp, tp and cp sizes (1 without a mesh): its registry rules
  // and its composite name.
  StrategySpec spec() const;
};

// What a strategy holds beyond its resident shards and the activations, in the two phases of a
// micro-batch's backward where the activation peak falls (activation_model.h): while the head's
// backward runs (everything saved is alive) and while a block's backward (or its recompute) runs.
struct WorkingSet {
  double head = 0;   // bytes during the head's backward
  double block = 0;  // bytes during the backward of the block whose phase is largest
  double block_comm = 0;  // of `block`: communication buffers (fsdp2's gather and reduce)
  // Where they differ from block to block (fsdp, fsdp2): the bytes and communication buffers
  // during each block's backward, in block order (block = their largest); empty elsewhere.
  std::vector<double> blocks, blocks_comm;
  // Each block's output stays until that block's backward is over (fsdp's block function
  // keeps it): under checkpointing it is alive beside the block's recompute.
  bool block_outputs_kept = false;
  double max() const { return head > block ? head : block; }
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The composite name (registry.h): "fsdp2+tp2".
  virtual std::string name() const = 0;

  virtual double forward_backward(const std::vector<MicroBatch>& micro_batches, int64_t step,
                                  PhaseTimes& times) = 0;
  // Global mean loss without gradients (evaluation); collective like forward_backward.
  virtual double eval_loss(const std::vector<MicroBatch>& micro_batches) = 0;
  // Logits of this rank's micro-batches, concatenated: [M*B, T, V] float32, on every pp / tp
  // rank of the data-parallel group (collective like eval_loss). For checking loaded weights.
  virtual torch::Tensor eval_logits(const std::vector<MicroBatch>& micro_batches) = 0;

  virtual std::vector<OptimSlot>& optim_slots() = 0;
  // Global L2 norm of the gradient over all trainable parameters (collective where sharded).
  virtual double grad_norm() = 0;
  virtual void zero_grad() = 0;
  virtual HeldBytes held_bytes() const = 0;
  // Bytes the strategy itself adds to a step's peak beyond held_bytes() and the activations:
  // gathered (unsharded) parameters, full-size gradients and communication buffers of the units
  // in flight (fsdp, fsdp2), in each phase of the backward where the activation peak can fall.
  // Part of the measured activation_bytes, so the activation prediction composes it in.
  virtual WorkingSet working_set() const { return {}; }

  // Factor the next forward_backward() multiplies the loss by before its backward (fp16 dynamic
  // loss scaling, train/loss_scaler.h); 1 otherwise.
  void set_loss_scale(double loss_scale) { loss_scale_ = loss_scale; }
  double loss_scale() const { return loss_scale_; }

  // Parameters of the whole model (numel) and trainable (numel), for the result file.
  virtual int64_t params_total() const = 0;
  virtual int64_t params_trainable() const = 0;

  // What this rank holds of every parameter — whole tensors, a stage's layers, FSDP2 rows, TP
  // slices — as regions of the whole named tensors (model/hf/held_tensor.h). --init-from and
  // --load-adapter fill exactly these regions; --save-adapter gathers the primary ones.
  virtual std::vector<model::hf::HeldTensor> held_tensors() {
    throw user_error("--strategy ", name(), ": loading or saving weights by name "
                     "(--init-from, --load-adapter, --save-adapter) is not implemented; use "
                     "single, ddp, fsdp2, pp or tp");
  }

 private:
  double loss_scale_ = 1.0;
};

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options);

}  // namespace hlp::parallel
