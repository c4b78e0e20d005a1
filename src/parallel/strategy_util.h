#pragma once
// Pieces every strategy uses: building the LoRA model, timing compute without the waits, the
// global mean loss, reduced-precision autocast, the scaled backward.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/half_emulation.h"
#include "model/hybrid_lm.h"
#include "model/precision.h"
#include "parallel/sharded_unit.h"
#include "parallel/strategy.h"

namespace hlp::parallel {

// The whole model with LoRA applied (deterministic in (seed, parameter name)). With
// Values::deferred only the LoRA factors hold values; the caller materialises every other
// parameter (materialise_on_device below) one at a time and keeps its part of it. Drawn models
// are moved to options.device; deferred ones stay on the CPU until materialised.
model::HybridLM build_model(const StrategyOptions& options,
                            model::Values values = model::Values::drawn);

// Waits for `work` if there is one (nullptr: nothing in flight).
void wait_for(const comm::WorkPtr& work);

// Adds to `seconds` the wall time of its scope minus the time this thread was blocked on
// communication inside it, so forward_s / backward_s count compute only and the waits count
// once, as comm_exposed_s / pipeline_wait_s (measured by the communicator).
class ComputeTimer {
 public:
  explicit ComputeTimer(double& seconds);
  ~ComputeTimer();
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;

 private:
  double& seconds_;
  double start_s_;
  double blocked_start_s_;
};

// Mean over data-parallel ranks of each rank's mean loss (collective over dp_comm; nullptr = 1).
double dp_mean(comm::Communicator* dp_comm, double local_mean);

// Sum of squares of the slots' gradients (float64 accumulation).
double local_grad_sq(const std::vector<OptimSlot>& slots);

// Gives a deferred parameter its values (model/init.h, drawn on the CPU generator: the same
// values on every device), stores it in `base` when it is a frozen matrix (model/precision.h)
// and then moves it to `device`. A no-op move on the CPU.
void materialise_on_device(const std::string& name, const torch::Tensor& param, uint64_t seed,
                           const torch::Device& device, model::BaseDtype base);

// Options for a small bookkeeping tensor (loss, norm, stage table) sent over `comm`: on the
// CPU for MPI, on the communicator's GPU for NCCL (Communicator::scalar_device()).
at::TensorOptions scalar_options_for(const comm::Communicator& comm, at::ScalarType dtype);

// The values of t on the host (t itself when it already is a CPU tensor).
at::Tensor to_host(const at::Tensor& t);

// Reduced-precision compute with fp32 master weights for the scope (fp32: no-op).
//   CUDA tensors: CUDA autocast to model::autocast_dtype(precision) (bf16 or fp16).
//   CPU tensors, bf16: CPU autocast to bfloat16.
//   CPU tensors, fp16: float16 emulation of the matmuls (model/half_emulation.h): LibTorch's
//         CPU has no float16 GEMM and its CPU autocast takes bfloat16 only.
class AutocastScope {
 public:
  explicit AutocastScope(model::Precision precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool cpu_autocast_;
  bool cuda_autocast_;
  bool previous_enabled_ = false;
  at::ScalarType previous_cpu_dtype_ = at::kBFloat16;
  bool previous_cuda_enabled_ = false;
  at::ScalarType previous_cuda_dtype_ = at::kHalf;
  model::HalfEmulationGuard half_emulation_;
};

// The loss of one micro-batch back-propagated with the loss scale folded in: `loss` is what the
// strategy differentiates (already / M), the seed gradient is loss_scale (1 = loss.backward()).
void backward_scaled(const torch::Tensor& loss, double loss_scale);

// Parameters with their names, in named_parameters() order.
std::vector<std::pair<std::string, torch::Tensor>> named_params(const torch::nn::Module& m);

// Every parameter of `m` as a whole HeldTensor (replicas: primary only where `primary`).
std::vector<model::hf::HeldTensor> whole_held_tensors(const torch::nn::Module& m, bool primary);

int64_t numel_of(const std::vector<std::pair<std::string, torch::Tensor>>& params,
                 bool trainable_only);

// Expert parallelism as a strategy sees it (expert_parallel.h, mesh_layout.h): a rank holds
// E / ep of every sparse layer's routed experts. An expert's gradient on its rank already sums
// the contributions of every token of the expert group (the exchange's backward brings them);
// averaged over its replicas (the ranks holding the same experts) and divided by ep it is the
// gradient of the global mean loss, like a dp-averaged one. Inactive (ep 1) without --ep.
struct ExpertAxis {
  int ep = 1;
  std::shared_ptr<comm::Communicator> group;     // the expert group (Mesh::ep_comm)
  std::shared_ptr<comm::Communicator> replicas;  // same experts (Mesh::ep_replica_comm)
  bool active() const { return ep > 1; }
};
ExpertAxis expert_axis(const StrategyOptions& options);
// options.model with this rank's slice of the experts (ModelConfig::moe_ep): what it builds.
model::ModelConfig rank_model_config(const StrategyOptions& options);
// Whether a slot (a parameter, or its "[shard]") is a routed expert's.
bool is_expert_slot(const OptimSlot& slot);
// The gradients' sum of squares when every rank holds whole parameters (ddp, pp): the routed
// experts' part summed over the expert group (each rank holds other experts; replicas alike).
double grad_sq_with_experts(const std::vector<OptimSlot>& slots, const ExpertAxis& ep);
// After the reduction over the replicas (an average): the experts' gradients / ep.
void finish_expert_grads(const std::vector<OptimSlot>& slots, const ExpertAxis& ep);
// Replicas (ddp, pp): `flat`, the experts' gradients of `slots` in one buffer, averaged over
// their replicas, then finish_expert_grads.
void reduce_expert_grads(const at::Tensor& flat, const std::vector<OptimSlot>& slots,
                         const ExpertAxis& ep);
// fsdp2's unit of `params` (sharding_unit.h): with --ep, the routed experts among them sharded
// over their replicas and the rest over `dp`, gathered and reduced together (combine_units).
std::unique_ptr<ShardedUnit> per_param_unit_with_experts(NamedParams params,
                                                         std::shared_ptr<comm::Communicator> dp,
                                                         const ExpertAxis& ep,
                                                         const Materialise& materialise);
// whole_held_tensors for a replica of the non-expert parameters: experts are primary on the
// first of their replicas, the rest where `primary`.
std::vector<model::hf::HeldTensor> whole_held_tensors(const torch::nn::Module& m, bool primary,
                                                      const ExpertAxis& ep);

}  // namespace hlp::parallel
