#pragma once
// Predicted activation memory: what a rank's peak holds beyond parameters, gradients and
// optimizer state (the measured `activation_bytes`), predicted before the first step.
//
// The per-layer-kind numbers are measured, not written down: each layer kind of the run's model
// (G, A, S, and the head: final norm + LM head + loss) is built alone with the run's LoRA,
// kernels, attention implementation and precision, and one forward + backward of it is run
// under the allocator counter at two short lengths (probe_lengths). Attention is linear in T
// (blocked / sdpa, issue #15), so bytes(T) = a + b T per kind; the fit is extrapolated to the
// run's T. The composition into a rank's peak is the model:
//   held      = in_flight x (input + sum over the rank's layers of kept + saved of the head),
//               kept = saved, or saved_checkpointed under checkpointing
//   peak      = max(held + transient of the head,
//                   max over blocks l of held - saved of the head - sum_{j > l} kept_j
//                   + transient_l, and under checkpointing + saved_l - kept_l)
//   (backward runs the head first, then the blocks from the last; by block l's backward what the
//   head and the later blocks kept is freed, and a checkpointed block recomputes its whole saved
//   set; pipeline stages compose over their schedule table instead, below)
// The strategy's own working set (Strategy::working_set(): fsdp's gathered units, their gradient
// and communication buffers), which the measured activation_bytes hold too, is added in the
// phase it belongs to: fsdp gathers no block while the head's backward runs.
// in_flight = micro-batches whose activations a rank holds at once: 1 for data parallelism,
// min(M, p - stage) for 1F1B, M for GPipe.
// Tensor parallelism: a tp rank computes every block with 1/t of the heads and of the MLP width
// (tensor_parallel.h), its norms, residual stream and head at full size; so its layer kinds are
// probed on tp_rank_config(config, t), the model with those sliced widths, and composed as above.
// Pipeline schedules with several chunks per stage or a split backward (interleaved, zb-h1)
// compose per chunk over the stage's schedule table instead (predict_stage_activation_bytes):
// the peak over the table of the units alive (F .. BW, or F .. W), a unit between its B and its
// W holding `split_pending` more (the weight nodes' output gradients W needs).
// A naive-attention run is quadratic in T: its A / S kinds are probed at the run's T itself.
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora_config.h"
#include "model/precision.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/strategy.h"

namespace hlp::train {

// Bytes of one layer kind for one micro-batch of B sequences of T tokens.
struct LayerActivation {
  std::string kind;                // "G", "A", "S" or "head"
  double saved = 0;                // kept from forward to backward, its output included
  double saved_checkpointed = 0;   // the same under activation checkpointing
  double transient = 0;            // extra peak inside its backward, above `saved`
  double split_pending = 0;        // held from B to W beyond `saved` (split backward only)
};

struct ActivationProfile {
  int64_t micro_batch = 0, seq_len = 0;
  std::vector<int64_t> probe_lengths;  // the lengths measured (one when T itself was probed)
  std::vector<LayerActivation> kinds;  // the layer kinds present, then "head"
  double input_bytes = 0;              // [B, T, D] fp32: a stage's input / the embedding output
  bool embedding_trains = false;       // the embedding's output carries a gradient (kept)
  const LayerActivation* find(const std::string& kind) const;
};

// How the probe measures: current and peak bytes of the run's allocator, and a peak reset.
struct MemoryProbe {
  std::function<int64_t()> current_bytes;
  std::function<int64_t()> peak_bytes;
  std::function<void()> reset_peak;
};

// What the probe measured of each layer kind at its lengths, before extrapolation to a run's T:
// it depends on T only through probe_lengths(config, T), so runs that differ in T alone (above
// the probe lengths) share one measurement (hlp-plan, hlp-sweep's planning).
struct ActivationSamples {
  int64_t micro_batch = 0;
  std::vector<int64_t> probe_lengths;
  bool embedding_trains = false;
  struct Kind {  // one value per probe length
    std::string kind;
    std::vector<double> saved, transient, saved_checkpointed, split_pending;
  };
  std::vector<Kind> kinds;  // the layer kinds present, then "head"
};

// The lengths a run of T tokens is probed at: 128 and 256 (and 384 for naive attention,
// quadratic in T), or T itself when T is not longer.
std::vector<int64_t> probe_lengths(const model::ModelConfig& config, int64_t seq_len);

// Builds and runs each layer kind of `config` at `lengths` (measure_activations) and fits the
// values to the run's T (extrapolate_profile); probe_activations does both.
ActivationSamples measure_activations(const model::ModelConfig& config,
                                      const model::LoraConfig& lora, int64_t micro_batch,
                                      const std::vector<int64_t>& lengths,
                                      model::Precision precision, model::BaseDtype base,
                                      bool flat_buffers, const c10::Device& device,
                                      const MemoryProbe& memory, bool split_backward = false);
ActivationProfile extrapolate_profile(const ActivationSamples& samples,
                                      const model::ModelConfig& config, int64_t seq_len);

// Builds and runs each layer kind of `config` (a throwaway copy with its own parameters;
// the run's model and the global random generator are untouched). Leaves the peak reset.
// Frozen matrices are stored in `base` (resolved) as the run stores them. flat_buffers: flat
// fsdp's FlatParameters, one per storage dtype of a unit, each requiring grad as a whole when a
// member trains (sharded_unit.h), so autograd also computes the frozen members' weight
// gradients and keeps the inputs they need.
ActivationProfile probe_activations(const model::ModelConfig& config,
                                    const model::LoraConfig& lora, int64_t micro_batch,
                                    int64_t seq_len, model::Precision precision,
                                    model::BaseDtype base, bool flat_buffers,
                                    const c10::Device& device, const MemoryProbe& memory,
                                    bool split_backward = false);

// The layer shapes one of `tp` tensor-parallel ranks computes: attention, KV and gated-delta
// heads and the MLP width divided by tp (JetBlock's replicated kernel generator keeps its full
// width: its reduction is divided too where it divides). tp = 1: config itself.
model::ModelConfig tp_rank_config(const model::ModelConfig& config, int tp);

// One micro-batch through blocks [first_block, end_block) (+ the head): what it holds while
// alive (its saved tensors and its input), what it adds between B and W, and the largest extra
// working set of one of its backwards. NaN where a layer kind was not probed.
struct ActivationParts {
  double held = 0, split_pending = 0, working = 0;
  // of `working`: the head's backward's own; the largest over the blocks' backwards, relative to
  // `held` (what the head and the later blocks saved is freed by then: may be negative); the
  // head's saved bytes (in `held`)
  double layer_working = 0, head_working = 0, head_saved = 0;
  // each block's own (relative to `held`, like layer_working), in block order
  std::vector<double> block_working;
};
ActivationParts activation_parts(const ActivationProfile& profile, const model::ModelConfig& config,
                                 int64_t first_block, int64_t end_block, bool has_head);

// The rank's predicted peak beyond its resident parameters, gradients and optimizer state, at
// the phase where it falls: the activations alive then and the strategy's working set then.
struct RankActivation {
  double activations = 0, working_set = 0;
  double comm_buffers = 0;  // of working_set: its communication buffers (fsdp2's, block phase)
  double total() const { return activations + working_set; }
};

// The peak for blocks [first_block, end_block) and the head where it holds it (the embedding's
// output and a later stage's input are the same [B, T, D] input), with `in_flight`
// micro-batches alive at once, and the strategy's `working_set` in each backward phase.
RankActivation predict_activation(const ActivationProfile& profile, const model::ModelConfig& config,
                                  int64_t first_block, int64_t end_block, bool has_head,
                                  int64_t in_flight, const parallel::WorkingSet& working_set = {});

// One rank's predicted peak beyond its held state, composed as the trainer runs it: the whole
// model (no pipeline), or pipeline stage `stage` of `stages` (its chunks from `split`, over the
// stage's table of `spec`); plus the context-parallel transition pass when
// `cp_transition_tokens` > 0 (cp_activation_extra_bytes); plus the strategy's working set at the
// peak's phase. `config` is the model (the layer pattern; its activation_checkpointing decides
// the composition); `tp` divides the heads and MLP for the cp term as tp_rank_config does.
// hlp-train (before its first step) and hlp-plan both predict with it.
RankActivation predict_rank_activation(const ActivationProfile& profile,
                                       const model::ModelConfig& config, int tp,
                                       const parallel::PipeSpec* spec,
                                       const std::vector<int64_t>* first_block,
                                       const std::vector<int64_t>* end_block, int stage,
                                       int64_t micro_batch, int64_t cp_transition_tokens,
                                       const parallel::WorkingSet& working_set);

// Context parallelism (--cp): what a rank's G layers keep beyond the probed layer, for one
// micro-batch of `micro_batch` rows whose `transition_tokens` local tokens lie outside the
// sequence's first piece (gated_deltanet.cpp core_pieces): the transition pass's v = 0 input
// and its outputs R [B, L, H, dk], and the fused core's state entering every chunk [H, dk, dk],
// all float32, per G layer: B L H dk (2 + dk / C) 4 bytes. With activation checkpointing they
// live for one recomputed block only: 0. The probe itself runs at T / cp (the rank's tokens).
double cp_activation_extra_bytes(const model::ModelConfig& config, int64_t micro_batch,
                                 int64_t transition_tokens);

// A pipeline stage's predicted activation peak under its schedule table: `chunks` [V] are the
// stage's chunks' parts, `actions` its table (parallel::stage_actions).
double predict_stage_activation_bytes(const std::vector<ActivationParts>& chunks,
                                      const std::vector<parallel::PipeAction>& actions);

}  // namespace hlp::train
