// The strategy registry's tables and rules (registry.h).
#include "parallel/registry.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common/error.h"
#include "common/printable.h"

namespace hlp::parallel {
namespace {

constexpr MeshAxis PP = MeshAxis::PP, TP = MeshAxis::TP, CP = MeshAxis::CP, EP = MeshAxis::EP;

// The load-balancing loss pools the router logits of every sparse layer and every token of a
// forward (model/moe.h): an axis that splits the layers or the tokens of a forward would need
// them gathered first.
std::string moe_aux_refusal(const RunFacts& run, const char* axis, const char* splits) {
  const model::ModelConfig* m = run.model;
  if (!m || !m->moe_aux_loss || m->count_moe_layers() == 0) return "";
  return std::string(axis) + " splits " + splits + " of a forward, over which the load-balancing "
         "loss (output_router_logits true in the config.json) pools the router logits; not "
         "implemented yet: set output_router_logits to false, or use ddp, fsdp or fsdp2";
}

std::string pp_check(int pp, const RunFacts& run) {
  const int V = std::max(1, run.pp_virtual);
  if (std::string why = moe_aux_refusal(run, "--pp", "the sparse layers"); !why.empty()) return why;
  if (run.model) {
    const int64_t layers = run.model->num_layers();
    if (pp > layers)
      return "--pp " + std::to_string(pp) + " asks for more pipeline stages than the model has "
             "layers (" + std::to_string(layers) + "); use --pp <= " + std::to_string(layers);
    if (int64_t(pp) * V > layers)
      return "--pp " + std::to_string(pp) + " x --pp-virtual " + std::to_string(V) + " = " +
             std::to_string(pp * V) + " model chunks, but the model has " +
             std::to_string(layers) + " layers; lower --pp-virtual or --pp";
  }
  // the schedule's own checks, at the micro-batch count when known (else a multiple of pp)
  PipeSpec spec{run.pp_schedule, pp, V, run.micro_batches > 0 ? run.micro_batches : pp};
  try {
    validate_schedule(spec);
  } catch (const UserError& e) {
    return e.what();
  }
  if (spec.splits_backward() && run.model && run.model->activation_checkpointing)
    return std::string("--pp-schedule ") + to_string(run.pp_schedule) + " cannot split the "
           "backward of a checkpointed block (its recompute runs inside B); drop "
           "--activation-checkpointing or use --pp-schedule 1f1b";
  return "";
}

std::string tp_check(int tp, const RunFacts& run) {
  const model::ModelConfig* m = run.model;
  if (m && m->activation_checkpointing)
    return "--activation-checkpointing is not supported with --tp > 1 yet";
  if (run.lora_dropout > 0) {
    char dropout[32];
    std::snprintf(dropout, sizeof(dropout), "%g", run.lora_dropout);
    return std::string("--lora-dropout ") + dropout + " is not supported with --tp > 1 (partners "
           "would draw different masks); use --lora-dropout 0";
  }
  if (!m) return "";
  if (m->count_moe_layers() > 0)
    return "--tp does not split mixture-of-experts layers; split their experts with --ep, or "
           "use ddp, fsdp, fsdp2, pp or cp";
  auto divides = [&](int64_t n, const char* what) -> std::string {
    if (n % tp == 0) return "";
    return "--tp " + std::to_string(tp) + " does not divide the model's " + what + " (" +
           std::to_string(n) + "); choose a --tp that divides it";
  };
  const auto [has_gdn, has_attention] = mixing_layers(*m);
  std::string why;
  if (has_attention) why = divides(m->attn_heads, "attention heads");
  if (why.empty() && has_attention) why = divides(m->attn_kv_heads, "attention KV heads");
  if (why.empty() && has_gdn) why = divides(m->gdn_heads, "gated-delta heads");
  // Qwen3.5 / Qwen3-Next: a rank keeps whole key heads with the value heads they serve
  if (why.empty() && has_gdn) why = divides(m->gdn_key_head_count(), "gated-delta key heads");
  if (why.empty()) why = divides(m->mlp_hidden, "MLP width");
  return why;
}

std::string cp_check(int cp, const RunFacts& run) {
  if (std::string why = moe_aux_refusal(run, "--cp", "the tokens"); !why.empty()) return why;
  // NCCL ignores tags and matches a pair's messages in issue order. The exchanges issue them in
  // an order every rank derives alike (parallel/context_parallel.h): halos walk one list of
  // (target, source) piece pairs, the state chain the pieces in position order, ring attention
  // its steps, the allgather scheme is a collective; so the messages from A to B leave A and
  // are received by B in the same order, and each direction has its own NCCL lane. Compiled,
  // not yet run on a GPU (the GPU check's issue).
  if (run.seq_len > 0) {
    const bool zigzag = run.cp_layout == CpLayout::zigzag;
    const int pieces = zigzag ? 2 * cp : cp;  // model::seq_piece_count
    if (run.seq_len % pieces != 0)
      return "--seq-len " + std::to_string(run.seq_len) + " cannot be cut into " +
             std::to_string(pieces) + " equal pieces (cp " + std::to_string(cp) +
             (zigzag ? ", zigzag layout: 2 pieces a rank" : "") + "); use a multiple of " +
             std::to_string(pieces);
  }
  const model::ModelConfig* m = run.model;
  if (!m) return "";
  // the all-to-all schemes give each cp rank whole heads of a tp rank's share
  const int tp = std::max(1, run.tp);
  auto heads_refusal = [&](const char* option, int64_t heads, const char* what,
                           const char* instead) -> std::string {
    if (heads % cp == 0) return "";
    return std::string(option) + " alltoall shards the " + what + " over the cp ranks: " +
           std::to_string(heads) + (tp > 1 ? " a tp rank" : "") + " do not divide over --cp " +
           std::to_string(cp) + "; use " + instead + " or a --cp that divides them";
  };
  const auto [has_gdn, has_attention] = mixing_layers(*m);
  if (has_gdn && run.cp_scheme == CpScheme::alltoall)
    if (std::string why = heads_refusal("--cp-scheme", m->gdn_heads / tp, "gated-delta heads",
                                        "--cp-scheme chain or allgather");
        !why.empty())
      return why;
  // (KV heads fewer than the cp ranks are repeated until they divide: model::attention_kv_repeat)
  if (has_attention && run.cp_attention == CpAttention::alltoall)
    return heads_refusal("--cp-attention", m->attn_heads / tp, "attention heads",
                         "--cp-attention ring");
  return "";
}

std::string ep_check(int ep, const RunFacts& run) {
  const model::ModelConfig* m = run.model;
  if (!m) return "";
  const std::string option = "--ep " + std::to_string(ep);
  if (m->count_moe_layers() == 0)
    return option + " splits the experts of mixture-of-experts layers, and this model has none "
           "(no layer with num_experts > 0 in its config); drop --ep";
  if (m->moe_experts % ep != 0)
    return option + " does not divide the model's experts (" + std::to_string(m->moe_experts) +
           " a sparse layer); choose an --ep that divides it";
  return "";
}

const char* kSingleInstead =
    "single runs on one rank; use ddp/fsdp/fsdp2 with --tp/--pp/--cp, or --strategy tp / pp / cp";
const char* kFsdpInstead =
    "flat-parameter sharding (FSDP1) inside a model-parallel mesh is not implemented; use fsdp2 "
    "(per-parameter sharding) or ddp";

}  // namespace

const std::vector<StrategyEntry>& strategy_entries() {
  static const std::vector<StrategyEntry> entries = {
      {StrategyKind::single, "single", DpKind::single, std::nullopt, {},
       "the whole model (1 rank; the reference)", kSingleInstead},
      {StrategyKind::ddp, "ddp", DpKind::ddp, std::nullopt, {PP, TP, CP, EP},
       "a full replica, gradients all-reduced in buckets during the backward", ""},
      {StrategyKind::fsdp, "fsdp", DpKind::fsdp, std::nullopt, {},
       "1/n of each block's flat parameter buffer (FSDP1 / ZeRO-3: frozen weights get "
       "gradients too)", kFsdpInstead},
      {StrategyKind::fsdp2, "fsdp2", DpKind::fsdp2, std::nullopt, {PP, TP, CP, EP},
       "1/n of every parameter along dim 0 (FSDP2: only trainable shards reduce-scattered)", ""},
      {StrategyKind::pp, "pp", DpKind::ddp, PP, {TP, CP, EP},
       "the layers of one pipeline stage (ddp over what --pp leaves)", ""},
      {StrategyKind::tp, "tp", DpKind::ddp, TP, {PP, CP, EP},
       "1/t of every projection (Megatron column / row; ddp over what --tp leaves)", ""},
      {StrategyKind::cp, "cp", DpKind::ddp, CP, {PP, TP, EP},
       "1/cp of every sequence (ddp over what --cp leaves)", ""},
  };
  return entries;
}

const std::vector<AxisEntry>& axis_entries() {
  static const std::vector<AxisEntry> entries = {
      {PP, "pp", "the layers of one pipeline stage (or V chunks of them), activations "
       "point-to-point between stages", {}, pp_check},
      {TP, "tp", "1/t of every attention / GDN / MLP projection, one all-reduce forward and "
       "one backward per block half", {}, tp_check},
      {CP, "cp", "1/cp of every sequence's tokens (G layers pass the delta-rule state, S "
       "layers a window halo, A layers ring attention)",
       {{PP, "combine --cp with ddp, fsdp2 or --tp"}}, cp_check},
      {EP, "ep", "1/ep of every MoE layer's routed experts (tokens dispatched to their experts' "
       "ranks and combined back by all-to-all; the rest of the model as the data-parallel kind "
       "holds it)", {}, ep_check, /*takes_ranks=*/false},
  };
  return entries;
}

const StrategyEntry& strategy_entry(StrategyKind kind) {
  for (const auto& e : strategy_entries())
    if (e.kind == kind) return e;
  throw std::logic_error("strategy_entry: a StrategyKind without an entry");
}

const AxisEntry& axis_entry(MeshAxis axis) {
  for (const auto& e : axis_entries())
    if (e.axis == axis) return e;
  throw std::logic_error("axis_entry: not a model-parallel axis");
}

StrategyKind parse_strategy(const std::string& text) {
  for (const auto& e : strategy_entries())
    if (text == e.name) return e.kind;
  std::string list;
  const auto names = strategy_names();
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  throw user_error("--strategy: unknown value '", printable(text), "'; choose ", list);
}

const char* to_string(StrategyKind kind) { return strategy_entry(kind).name; }

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& e : strategy_entries()) names.push_back(e.name);
  return names;
}

const char* to_string(DpKind kind) {
  switch (kind) {
    case DpKind::single: return "single";
    case DpKind::ddp: return "ddp";
    case DpKind::fsdp: return "fsdp";
    case DpKind::fsdp2: return "fsdp2";
  }
  return "unknown";
}

int StrategySpec::size(MeshAxis axis) const {
  return axis == PP ? pp : axis == TP ? tp : axis == CP ? cp : axis == EP ? ep : 1;  // dp: 1
}

int& StrategySpec::size(MeshAxis axis) {
  if (axis == MeshAxis::DP) throw std::logic_error("StrategySpec: dp is what the world leaves");
  return axis == PP ? pp : axis == TP ? tp : axis == EP ? ep : cp;
}

std::string StrategySpec::name() const {
  const StrategyEntry& s = strategy_entry(strategy);
  std::string out = s.name;
  for (const auto& a : axis_entries())
    if (size(a.axis) > 1 && s.axis != a.axis) out += "+" + (a.name + std::to_string(size(a.axis)));
  return out;
}

void check_composition(const StrategySpec& spec) {
  const StrategyEntry& s = strategy_entry(spec.strategy);
  // the axes the run has: those given a size, and the one the strategy itself names
  auto present = [&](MeshAxis a) { return spec.size(a) > 1 || s.axis == a; };
  for (const auto& a : axis_entries()) {
    if (spec.size(a.axis) < 1)
      throw user_error("--", a.name, " must be >= 1 (got ", spec.size(a.axis), ")");
    if (!present(a.axis) || s.axis == a.axis) continue;
    const auto& with = s.composes_with;
    if (std::find(with.begin(), with.end(), a.axis) == with.end())
      throw user_error("--strategy ", s.name, " does not combine with --", a.name, ": ", s.instead);
  }
  for (const auto& a : axis_entries()) {
    if (!present(a.axis)) continue;
    for (const auto& [other, instead] : a.not_with)
      if (present(other))
        throw user_error("--", a.name, " with --", axis_entry(other).name,
                         " is not implemented; ", instead);
  }
}

StrategySpec with_defaults(StrategySpec spec, int world) {
  const auto axis = strategy_entry(spec.strategy).axis;
  if (!axis || spec.size(*axis) != 1) return spec;
  const int others = spec.model_ranks();  // the named axis is 1 here
  if (others > 0 && world / others > 1) spec.size(*axis) = world / others;
  return spec;
}

void check_world(const StrategySpec& spec, int world) {
  const StrategyEntry& s = strategy_entry(spec.strategy);
  if (s.dp == DpKind::single && world != 1)
    throw user_error("--strategy single runs on 1 rank, but ", world, " were launched; use ddp, "
                     "fsdp or fsdp2 for more ranks");
  if (s.axis && spec.size(*s.axis) < 2) {
    const char* a = axis_entry(*s.axis).name;
    throw user_error("--strategy ", s.name, " needs --", a, " N with N >= 2 (e.g. --strategy ",
                     s.name, " --", a, " 2), or 2 or more ranks");
  }
  make_mesh_shape(world, spec.tp, spec.pp, spec.cp, spec.ep);  // divisibility, with its message
}

std::string check_axis(MeshAxis axis, int size, const RunFacts& facts) {
  return size > 1 ? axis_entry(axis).check(size, facts) : "";
}

std::string check_run(const StrategySpec& spec, const RunFacts& run) {
  RunFacts facts = run;
  facts.tp = spec.tp;  // cp's all-to-all shards the heads a tp rank holds
  for (const auto& a : axis_entries()) {
    std::string why = check_axis(a.axis, spec.size(a.axis), facts);
    if (!why.empty()) return why;
  }
  return "";
}

MeshShape mesh_shape(const StrategySpec& spec, int world) {
  return make_mesh_shape(world, spec.tp, spec.pp, spec.cp, spec.ep);
}

std::vector<StrategySpec> single_axis_meshes(int ranks) {
  std::vector<StrategySpec> out;
  out.push_back({StrategyKind::single});  // the reference (the only one on one rank)
  if (ranks < 2) return out;
  for (const auto& s : strategy_entries())  // each data-parallel kind over every rank
    if (!s.axis && s.dp != DpKind::single) out.push_back({s.kind});
  for (const auto& a : axis_entries()) {
    for (int size = 2; size <= ranks; ++size) {
      if (ranks % size != 0) continue;
      StrategySpec spec;
      spec.size(a.axis) = size;
      if (size == ranks && a.takes_ranks) {  // every rank on the axis: its own strategy
        for (const auto& s : strategy_entries())
          if (s.axis == a.axis) spec.strategy = s.kind;
        out.push_back(spec);
        continue;
      }
      for (const auto& s : strategy_entries()) {
        const auto& with = s.composes_with;
        if (s.axis || std::find(with.begin(), with.end(), a.axis) == with.end()) continue;
        spec.strategy = s.kind;
        out.push_back(spec);
      }
    }
  }
  return out;
}

}  // namespace hlp::parallel
