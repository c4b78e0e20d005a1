#pragma once
// The strategy registry: the one place that says which strategies and mesh axes exist, what
// composes with what, what each requires of the run, and what a combination is called.
// hlp-train's options, make_strategy, the trainer, hlp-plan and hlp-sweep ask it and spell no
// strategy rule of their own. No LibTorch here: hlp-sweep links it on a login node.
//
// A run is a data-parallel kind on the dp axis times model-parallel axes:
//   --strategy single|ddp|fsdp|fsdp2   the data-parallel kind (single: one rank, no axis)
//   --strategy pp|tp|cp                ddp whose named axis takes every rank the others leave
//   --pp N --tp N --cp N               model-parallel axes; dp = world / (pp tp cp)
//   --ep N                             expert parallelism: carved out of the dp x cp ranks
//                                      (mesh_layout.h), so it multiplies nothing
// and its one name: the strategy, then every axis of size > 1 that the strategy does not name,
// in the order of axis_entries() (pp, tp, cp, ep): "fsdp2+tp2", "ddp+pp2+tp2", "tp+cp2",
// "fsdp2+ep4".
//
// The rules, in the order a run meets them (each throws hlp::UserError with a one-line message
// that says what to change):
//   check_composition(spec)      the options alone (hlp-train's option check, hlp-sweep)
//   with_defaults(spec, world)   --strategy pp|tp|cp without the size: every remaining rank
//   check_world(spec, world)     the world size: divisibility, single on one rank
//   check_run(spec, facts)       the model and run: heads divisible by tp, layers by pp, ...
// Adding an axis (src/parallel/README.md shows the diff --ep needs): one AxisEntry in
// registry.cpp, its MeshAxis and mesh size, and its implementation file.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/enum_names.h"
#include "model/config.h"
#include "parallel/mesh_layout.h"
#include "parallel/pipeline_schedule.h"

namespace hlp::parallel {

// What --strategy names.
enum class StrategyKind : uint8_t { single, ddp, fsdp, fsdp2, pp, tp, cp };
// How the ranks of the data-parallel axis hold the model and reduce its gradients.
enum class DpKind : uint8_t { single, ddp, fsdp, fsdp2 };
// --cp-layout: which pieces of the sequence a context-parallel rank holds.
enum class CpLayout : uint8_t { zigzag, contiguous };
inline constexpr EnumName<CpLayout> kCpLayoutNames[] = {{CpLayout::zigzag, "zigzag"},
                                                        {CpLayout::contiguous, "contiguous"}};
inline const char* to_string(CpLayout l) { return enum_name(l, kCpLayoutNames); }
inline CpLayout parse_cp_layout(const std::string& text) {
  return parse_enum("cp-layout", text, kCpLayoutNames);
}
// --cp-scheme: how the G layers see the sequence before their pieces (context_parallel.h):
// chain (the delta-rule state passed piece to piece, LASP-1) | allgather (every piece's
// transition and state gathered by every rank, each merging the prefix it needs; LASP-2, fla) |
// alltoall (the core's inputs re-sharded from sequence to heads and its output back, each rank
// running the whole sequence for its heads; DeepSpeed-Ulysses, Megatron-Core).
enum class CpScheme : uint8_t { chain, allgather, alltoall };
inline constexpr EnumName<CpScheme> kCpSchemeNames[] = {{CpScheme::chain, "chain"},
                                                        {CpScheme::allgather, "allgather"},
                                                        {CpScheme::alltoall, "alltoall"}};
inline const char* to_string(CpScheme s) { return enum_name(s, kCpSchemeNames); }
inline CpScheme parse_cp_scheme(const std::string& text) {
  return parse_enum("cp-scheme", text, kCpSchemeNames);
}
// Whether the G layers rerun their pieces' transition pass (chain, allgather: each piece's core
// starts from its predecessors' state) or not (alltoall: a rank's core sees the whole sequence).
inline bool runs_transition_pass(CpScheme s) { return s != CpScheme::alltoall; }
// --cp-attention: how the A and S layers see the keys before their pieces: ring (A: the KV
// blocks around the cp ring; S: a halo of window - 1 keys and values) | alltoall (queries, keys
// and values re-sharded from sequence to heads, the layer's own attention over the whole
// sequence for its heads, the output back).
enum class CpAttention : uint8_t { ring, alltoall };
inline constexpr EnumName<CpAttention> kCpAttentionNames[] = {{CpAttention::ring, "ring"},
                                                              {CpAttention::alltoall, "alltoall"}};
inline const char* to_string(CpAttention s) { return enum_name(s, kCpAttentionNames); }
inline CpAttention parse_cp_attention(const std::string& text) {
  return parse_enum("cp-attention", text, kCpAttentionNames);
}

struct StrategyEntry {
  StrategyKind kind;
  const char* name;                     // --strategy NAME, first part of the composite name
  DpKind dp;                            // what runs on the data-parallel axis
  std::optional<MeshAxis> axis;         // pp / tp / cp: the axis that takes the remaining ranks
  std::vector<MeshAxis> composes_with;  // model-parallel axes it can be given
  const char* holds;                    // what a rank holds, for --help and the READMEs
  const char* instead;                  // what to use for an axis it does not compose with
};

// What the rules of an axis may read of a run (no LibTorch). A field left at its default is
// not checked: hlp-sweep knows the mesh but not the model.
// Which token-mixing layer families a model has: G layers, attention (A or S) layers.
struct MixingLayers {
  bool gdn = false, attention = false;
};
inline MixingLayers mixing_layers(const model::ModelConfig& m) {
  const int64_t g = m.count_layers(model::LayerKind::gated_delta);
  return {g > 0, g < m.num_layers()};
}

struct RunFacts {
  const model::ModelConfig* model = nullptr;  // its shape and activation checkpointing
  double lora_dropout = 0;
  int64_t seq_len = 0;                        // T; 0 = unknown
  CpLayout cp_layout = CpLayout::zigzag;
  CpScheme cp_scheme = CpScheme::chain;
  CpAttention cp_attention = CpAttention::ring;
  int tp = 1;                                 // set by check_run from the spec
  PipeSchedule pp_schedule = PipeSchedule::one_f_one_b;
  int pp_virtual = 1;
  int micro_batches = 0;                      // per step and dp rank; 0 = unknown
  bool nccl = false;                          // the collectives run on NCCL
};

struct AxisEntry {
  MeshAxis axis;
  const char* name;  // "pp": the option --pp N, "+pp2" in composite names
  const char* holds;  // what a rank holds along it, for --help and the READMEs
  // Axes it does not combine with yet, each with what to do instead.
  std::vector<std::pair<MeshAxis, const char*>> not_with;
  // The run's constraints on this axis at `size` >= 2: "" or the refusal, a user message.
  std::string (*check)(int size, const RunFacts& run);
  // false for ep: its ranks are some of the data-parallel ones (it does not divide the world
  // size into a model-parallel factor)
  bool takes_ranks = true;
};

const std::vector<StrategyEntry>& strategy_entries();  // in --help order
const std::vector<AxisEntry>& axis_entries();          // in composite-name order: pp, tp, cp, ep
const StrategyEntry& strategy_entry(StrategyKind kind);
const AxisEntry& axis_entry(MeshAxis axis);            // pp, tp, cp or ep

StrategyKind parse_strategy(const std::string& text);  // UserError listing the choices
const char* to_string(StrategyKind kind);
std::vector<std::string> strategy_names();             // "single", "ddp", ...
const char* to_string(DpKind kind);

// One run's strategy and model-parallel sizes (dp is what the world leaves).
struct StrategySpec {
  StrategyKind strategy = StrategyKind::single;
  int pp = 1, tp = 1, cp = 1, ep = 1;

  int size(MeshAxis axis) const;  // pp, tp, cp, ep (DP: 1)
  int& size(MeshAxis axis);
  int model_ranks() const { return pp * tp * cp; }  // (ep takes none of its own)
  DpKind dp_kind() const { return strategy_entry(strategy).dp; }
  // The composite name, recorded in result files and printed by hlp-plan and hlp-sweep.
  std::string name() const;
  // pp or tp > 1: the stage / slice strategy (pipeline.h) runs it, whatever the dp kind.
  bool model_parallel() const { return pp > 1 || tp > 1; }
};

void check_composition(const StrategySpec& spec);
StrategySpec with_defaults(StrategySpec spec, int world);
void check_world(const StrategySpec& spec, int world);
// The first refusal among the axes of size >= 2 ("" when the run may go ahead).
std::string check_run(const StrategySpec& spec, const RunFacts& facts);
// The same for one axis at `size` (hlp-plan tries sizes before building a spec).
std::string check_axis(MeshAxis axis, int size, const RunFacts& facts);

// The mesh shape of `spec` on `world` ranks (after check_world).
MeshShape mesh_shape(const StrategySpec& spec, int world);

// Every strategy and mesh with at most one model-parallel axis that composition and the world
// size allow on `ranks`, in hlp-plan's order: single (on one rank), each data-parallel kind over
// every rank, then per axis and size 2..ranks dividing ranks, the axis's own strategy when it
// takes every rank, else each dp kind (on dp >= 2) that composes with the axis. Not checked
// against a run: check_run does that.
std::vector<StrategySpec> single_axis_meshes(int ranks);

}  // namespace hlp::parallel
