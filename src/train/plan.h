#pragma once
// hlp-plan (issue 24): per-rank memory and step time of every strategy and mesh a rank count
// allows, predicted before spending GPU hours.
//
// Memory per rank, the worst rank of a candidate (max over pipeline stages and dp ranks):
//   parameters, gradients, optimizer  closed forms over the model's parameter table
//                                     (model/accounting.h), with each strategy's layout exactly
//                                     as it builds it: full replicas; flat fsdp units sharded
//                                     ceil(N_u / n) with AdamW over this rank's trainable range;
//                                     fsdp2 rows ceil(d0 / n); a pipeline stage's chunks (the
//                                     same split_stages) with the tied matrix on both end
//                                     stages; tensor-parallel slices (tp_split_dim). Frozen
//                                     matrices in the base dtype (model/precision.h), the
//                                     rest fp32 (flat fsdp: one buffer per storage dtype);
//                                     fp32 gradients, AdamW 2 x fp32 per trainable element.
//   working set and                   fsdp / fsdp2, per backward phase
//   communication buffers             (parallel::sharded_working_set, the strategies' own
//                                     function): during the head's backward the root unit;
//                                     during block i's, also block i, i - 1 prefetched, i + 1's
//                                     reduce-scatter in flight and (fsdp2) i - 1's all-gather
//                                     buffers; inside a pipeline fsdp2 gathers the stage whole
//                                     before the step (no buffers at the peak). 0 elsewhere:
//                                     ddp, tp and pp work in place (MPI and NCCL keep their own
//                                     staging outside the allocator: not in hlp-train's
//                                     measured peak either).
//   activations                       the per-layer-kind probe (activation_model.h) run on this
//                                     machine's CPU at short T for the candidate's layer shapes
//                                     (tp_rank_config) and precision, extrapolated linearly in
//                                     T (T / cp under context parallelism), composed with the
//                                     working set per phase as hlp-train composes it
//                                     (predict_rank_activation).
//   reserve                           GPU only: the CUDA context outside the caching allocator
//                                     and the allocator's block rounding (kCudaContextBytes,
//                                     kAllocatorRounding below: estimates, not measured here).
// Fits: peak + reserve <= the device's memory (GPU) or the memory a rank may use on this
// machine (train/memory_limit.h: cgroup or MemAvailable, shared by the ranks).
//
// Expert parallelism (--ep, MoE models): a rank holds E / ep of every sparse layer's routed
// experts, sharded by fsdp2 over their dp cp / ep replicas; their gradients are reduced over
// those replicas (ring), and per micro-batch and sparse layer the dispatch and combine
// all-to-alls move (ep - 1) / ep of the rank's B T K routed rows, forward and backward (4
// exchanges of D activation-sized elements a row; an even router assumed), at the link speed.
//
// Step time: executed FLOPs of the rank (accounting.h) at a fraction `efficiency` of the
// device's peak (flat fsdp: also the frozen weights' weight gradients), plus communication from
// an alpha-beta model (ring collectives), with the pipeline bubble of the schedule
// (bubble_theory at f : b : w = 1 : 2 : 0, or 1 : 1 : 1 for zb-h1 full finetuning);
// communication is not assumed to overlap.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora_config.h"
#include "parallel/registry.h"
#include "parallel/stage_split.h"
#include "train/activation_model.h"
#include "train/config.h"
#include "train/trainer.h"

namespace hlp::train {

struct PlanDevice {
  std::string name;              // "h100-80", "cpu", ...
  double memory_bytes = 0;       // per rank
  std::string memory_source;
  double reserve_bytes = 0;      // beyond the allocator peak (GPU: CUDA context)
  double rounding = 0;           // allocator rounding, fraction of the allocator peak
  double peak_flops = 0;         // per device, at the run's precision
  std::string peak_source;
  double efficiency = 0;         // fraction of peak_flops the training step reaches
  std::string efficiency_source;  // "assumed", or the calibration that measured it
  double link_bytes_per_s = 0;   // per-rank ring bandwidth between ranks of a node
  double link_latency_s = 0;
  std::string link_source;
};

// The device names --gpu accepts (v100-16 ... h200, l40s-48, cpu).
const std::vector<std::string>& plan_device_names();
// Throws UserError listing plan_device_names() for an unknown name. `ranks`: on `cpu`, the
// memory of this machine is shared by the ranks.
// (a peak already measured by the caller, peak_flops > 0, is used instead of measuring again)
PlanDevice plan_device(const std::string& name, model::Precision precision, int ranks,
                       double peak_flops = 0, const std::string& peak_source = "");

// The planner's device name for a run's device (hlp-train's device kind and name): "cpu", a
// GPU row ("h100-80" ...) or "" when the planner has no row for it.
std::string plan_device_of(const std::string& kind, const std::string& name);

struct PlanCandidate {
  parallel::StrategyKind strategy = parallel::StrategyKind::single;
  int ranks = 1, dp = 1, pp = 1, tp = 1, cp = 1;
  int ep = 1;  // expert parallelism: divides dp x cp (MoE models)
  parallel::PipeSchedule pp_schedule = parallel::PipeSchedule::one_f_one_b;  // when pp > 1
  int pp_virtual = 1;
  // cp > 1: how the G layers and the attention layers exchange (--cp-scheme, --cp-attention)
  parallel::CpScheme cp_scheme = parallel::CpScheme::chain;
  parallel::CpAttention cp_attention = parallel::CpAttention::ring;
  parallel::StrategySpec spec() const { return {strategy, pp, tp, cp, ep}; }
  // the registry's composite name, then "n=4", a pipeline's schedule, cp's "G chain attn ring"
  std::string name() const;
};

// Every strategy and mesh with at most one model-parallel axis that `ranks` allows for `config`
// (the registry's single_axis_meshes, each pipeline schedule, and check_run: heads divisible by
// tp, layers by pp ...); `strategies` empty = all. With ranks 2 or more, `single` on one rank is
// added for reference. (LoRA dropout with tp is left to plan(), which lists it with its reason.)
std::vector<PlanCandidate> plan_candidates(int ranks, const model::ModelConfig& config,
                                           const TrainConfig& train,
                                           const std::vector<parallel::StrategyKind>& strategies);

struct HeldPrediction {
  double params = 0, grads = 0, optimizer = 0;
  double expert_params = 0;  // of params: the routed experts' (E / ep of them a sparse layer)
  // fsdp / fsdp2: gathered units, gradient and communication buffers in each backward phase
  // (parallel::sharded_working_set; a pipeline's fsdp2 stage: gathered whole in both)
  parallel::WorkingSet working_set;
};
// Bytes the strategy holds on (pipeline stage, dp rank) of a candidate: closed forms above,
// frozen matrices in the base dtype `base` (resolved; model/precision.h).
HeldPrediction predict_held(const PlanCandidate& c, const model::ModelConfig& config,
                            const model::LoraConfig& lora, model::BaseDtype base,
                            int64_t seq_len, const std::string& pp_split, int stage,
                            int dp_rank);

struct PlanRow {
  PlanCandidate candidate;
  HeldPrediction held;       // the worst rank's
  // the worst rank's, at the phase of its peak (activation_model.h predict_rank_activation):
  double activations = 0;    // activations alive
  double working_set = 0;    // the strategy's gathered units and gradient buffers
  double comm_buffers = 0;   // its communication buffers
  double reserve = 0;        // device reserve + rounding
  double peak_bytes = 0;     // allocator peak: held + working set + activations + comm buffers
  double limit_bytes = 0;
  bool fits = false;
  double compute_s = 0, comm_s = 0, bubble = 0, step_s = 0, tokens_per_s = 0;
  double all_to_all_s = 0;   // of comm_s: --ep's dispatch and combine
  double cp_exchange_s = 0;  // of comm_s: --cp's exchanges under its schemes (cp_exchange_s)
  std::string problem;       // non-empty: the candidate cannot run (the reason)
};

struct PlanInputs {
  TrainConfig train;              // model, T, batch, LoRA, precision, checkpointing, kernels
  model::ModelConfig model;
  model::LoraConfig lora;
  PlanDevice device;
  // Names what the probe depends on beyond (tp, micro-batch, the probe lengths of T / cp, flat
  // fsdp, split backward)
  // when a ProbeCache is shared by several configurations (hlp-plan --runs: the configuration's
  // options less its mesh); "" when one configuration is planned.
  std::string probe_fingerprint;
};

// Activation samples already measured, by fingerprint and probe shape: each is measured once
// and extrapolated to every T that shares it.
struct ProbeCache {
  std::map<std::string, ActivationSamples> samples;
};

// Probes (on this machine's CPU) and predicts every candidate; each probe shape (tp, micro-batch,
// probe lengths of T / cp, flat fsdp, split backward) is measured once, kept in `cache` when one
// is given.
std::vector<PlanRow> plan(const PlanInputs& in, const std::vector<PlanCandidate>& candidates,
                          ProbeCache* cache = nullptr);

// The candidate a run of `train` on `world` ranks is (its strategy, mesh and schedule, with
// hlp-train's defaults for the world size).
PlanCandidate candidate_of_run(const TrainConfig& train, int world);

// What the time model needs of one run of `in.train` on `world` ranks: its candidate, hlp-train's
// split of the global batch over its dp ranks and, for a pipeline, its stage split.
struct RunShape {
  PlanCandidate candidate;
  BatchSplit batch;
  std::optional<parallel::StageSplit> split;
  const parallel::StageSplit* stage_split() const { return split ? &*split : nullptr; }
};
RunShape run_shape(const PlanInputs& in, int world);

// The time terms of `row` (compute, communication, bubble, step, tokens/s) for its candidate;
// `split` the pipeline's stage split (nullptr without one), `batch` the global batch's split
// over the candidate's dp ranks (split_batch).
void predict_time(PlanRow& row, const PlanInputs& in, const parallel::StageSplit* split,
                  const BatchSplit& batch);

// --calibrate: measured runs, each with what the planner needs to predict its step time.
struct CalibrationRun {
  std::string path, label;
  PlanInputs inputs;
  RunShape shape;
  double measured_step_s = 0;          // median after the first step, slowest rank
  double predicted_before_step_s = 0;  // with the device's numbers (filled by calibrate)
  double predicted_step_s = 0;         // with the fitted numbers (filled by calibrate)
};
struct Calibration {
  double efficiency_scale = 1.0, link_scale = 1.0;  // multiply the device's efficiency, links
  double error_before = 0, error_after = 0;         // mean |log(predicted / measured)| step time
};
// Fits the two scales (grid search) to the runs' measured step times.
Calibration calibrate(std::vector<CalibrationRun>& runs);

// The table (ranked: fitting candidates by predicted tokens/s, then the rest) or CSV.
std::string format_plan(const std::vector<PlanRow>& rows, const PlanInputs& in, bool csv);

}  // namespace hlp::train
