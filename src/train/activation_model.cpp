#include "train/activation_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/accounting.h"
#include "model/hybrid_lm.h"
#include "model/lora.h"
#include "parallel/split_backward.h"
#include "parallel/strategy_util.h"

namespace hlp::train {

const LayerActivation* ActivationProfile::find(const std::string& kind) const {
  for (const auto& k : kinds)
    if (k.kind == kind) return &k;
  return nullptr;
}

namespace {

// One probe of a model part: bytes its forward keeps and the extra peak of its backward.
struct Probe {
  double saved = 0, transient = 0, split_pending = 0;
};

// part: one block (blocks [layer, layer + 1)) or only the head. x: [B, t, D] fp32 requiring
// grad, like the activations flowing between blocks; targets [B, t] for the head's loss.
Probe run_probe(model::HybridLM& part, bool head, int64_t B, int64_t t, model::Precision precision,
                bool with_backward, bool split_backward, const MemoryProbe& memory) {
  // Gradients live across steps in every strategy: allocate them before measuring.
  for (auto& p : part->parameters())
    if (p.requires_grad()) p.mutable_grad() = torch::zeros_like(p);  // on p's device
  auto generator = at::make_generator<at::CPUGeneratorImpl>(/*seed=*/12345);
  const torch::Device device = part->parameters().front().device();
  auto x = torch::randn({B, t, part->config().hidden}, generator).to(device).requires_grad_(true);
  auto targets = torch::zeros({B, t}, torch::TensorOptions(torch::kLong).device(device));

  Probe probe;
  const int64_t before = memory.current_bytes();
  torch::Tensor out;
  {
    parallel::AutocastScope autocast(precision);
    // head: [B, t, D] -> scalar loss (as the run computes it: --loss-impl); block: [B, t, D]
    out = head ? part->loss(x, targets) : part->forward_blocks(x);
  }
  const int64_t after_forward = memory.current_bytes();
  probe.saved = double(after_forward - before);
  if (with_backward && split_backward) {
    // zb-h1: B, then what stays until W beyond the saved tensors (x's gradient dropped, as a
    // stage sends it on), then W
    std::vector<torch::Tensor> trainable;
    for (auto& p : part->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    parallel::SplitBackward split;
    memory.reset_peak();
    {
      torch::Tensor input_grad = split.backward_input(out, torch::ones_like(out), x, trainable);
      probe.transient = double(std::max<int64_t>(0, memory.peak_bytes() - after_forward));
    }
    probe.split_pending = double(std::max<int64_t>(0, memory.current_bytes() - after_forward));
    split.backward_weight();
  } else if (with_backward) {
    memory.reset_peak();
    out.backward(torch::ones_like(out));  // the upstream gradient is part of the working set
    probe.transient = double(std::max<int64_t>(0, memory.peak_bytes() - after_forward));
  }
  return probe;
}

// Flat fsdp's rule on a probed part (one unit: a block, or the root with the head): the
// parameters of one storage dtype form one FlatParameter, which requires grad when any of them
// does.
void flat_buffers_require_grad(torch::nn::Module& part) {
  std::vector<std::pair<at::ScalarType, bool>> trains;  // per dtype: some member trains
  for (const auto& p : part.parameters()) {
    auto it = std::find_if(trains.begin(), trains.end(),
                           [&](const auto& d) { return d.first == p.scalar_type(); });
    if (it == trains.end()) trains.emplace_back(p.scalar_type(), p.requires_grad());
    else it->second = it->second || p.requires_grad();
  }
  for (auto& p : part.parameters())
    for (const auto& [dtype, any] : trains)
      if (dtype == p.scalar_type() && any) p.requires_grad_(true);
}

// Values measured at `lengths` -> the value at T: exact when T was measured, else the
// polynomial through the points (linear for two, quadratic for three).
double extrapolate(const std::vector<int64_t>& lengths, const std::vector<double>& values,
                   int64_t T) {
  if (lengths.size() == 1) return values[0];
  double value = 0;  // Lagrange form
  for (size_t i = 0; i < lengths.size(); ++i) {
    double term = values[i];
    for (size_t j = 0; j < lengths.size(); ++j)
      if (j != i) term *= double(T - lengths[j]) / double(lengths[i] - lengths[j]);
    value += term;
  }
  return std::max(0.0, value);
}

}  // namespace

std::vector<int64_t> probe_lengths(const model::ModelConfig& config, int64_t seq_len) {
  // Two attention tiles suffice where everything is linear in T; naive attention needs three
  // points (quadratic). Short runs are measured at their own T.
  const bool quadratic = config.attn_impl == model::AttnImpl::naive;
  std::vector<int64_t> lengths = quadratic ? std::vector<int64_t>{128, 256, 384}
                                           : std::vector<int64_t>{128, 256};
  if (seq_len <= lengths.back()) lengths = {seq_len};
  return lengths;
}

ActivationSamples measure_activations(const model::ModelConfig& config,
                                      const model::LoraConfig& lora, int64_t micro_batch,
                                      const std::vector<int64_t>& lengths,
                                      model::Precision precision, model::BaseDtype base,
                                      bool flat_buffers, const c10::Device& device,
                                      const MemoryProbe& memory, bool split_backward) {
  ActivationSamples samples;
  samples.micro_batch = micro_batch;
  samples.probe_lengths = lengths;
  for (const auto& p : model::parameter_table(config, lora))
    if (p.name == "embed_tokens.weight") samples.embedding_trains = p.trainable;

  // LoRA dropout draws from the global generator: the run must see the same stream as without
  // the probe.
  auto global_generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor generator_state = global_generator.get_state();
  torch::AutoGradMode grad_on(true);
  std::vector<std::string> kinds;
  for (char letter : std::string("GAS"))
    if (config.pattern.find(letter) != std::string::npos) kinds.emplace_back(1, letter);
  kinds.emplace_back("head");

  for (const auto& kind : kinds) {
    const bool head = kind == "head";
    const int64_t layer = head ? 0 : int64_t(config.pattern.find(kind[0]));
    ActivationSamples::Kind k;
    k.kind = kind;
    for (int64_t t : lengths) {
      for (bool checkpointing : {false, true}) {
        if (head && checkpointing) continue;  // the head is never checkpointed
        model::ModelConfig c = config;
        c.activation_checkpointing = checkpointing;
        model::HybridLM part = head ? model::HybridLM(c, /*seed=*/0, 0, 0, false, true)
                                    : model::HybridLM(c, /*seed=*/0, layer, layer + 1, false, false);
        model::apply_lora(part, lora);
        model::store_frozen_weights(*part, base);
        if (flat_buffers) flat_buffers_require_grad(*part);
        part->to(device);  // drawn on the CPU, like the run's parameters
        part->train();
        const Probe p = run_probe(part, head, micro_batch, t, precision, !checkpointing,
                                  split_backward, memory);
        if (checkpointing) {
          k.saved_checkpointed.push_back(p.saved);
        } else {
          k.saved.push_back(p.saved);
          k.transient.push_back(p.transient);
          k.split_pending.push_back(p.split_pending);
        }
      }
    }
    samples.kinds.push_back(std::move(k));
  }
  global_generator.set_state(generator_state);
  memory.reset_peak();
  return samples;
}

ActivationProfile extrapolate_profile(const ActivationSamples& samples,
                                      const model::ModelConfig& config, int64_t seq_len) {
  ActivationProfile profile;
  profile.micro_batch = samples.micro_batch;
  profile.seq_len = seq_len;
  profile.probe_lengths = samples.probe_lengths;
  profile.input_bytes = double(samples.micro_batch * seq_len * config.hidden * 4);
  profile.embedding_trains = samples.embedding_trains;
  const auto& lengths = samples.probe_lengths;
  for (const auto& k : samples.kinds) {
    const bool head = k.kind == "head";
    LayerActivation a;
    a.kind = k.kind;
    a.saved = extrapolate(lengths, k.saved, seq_len);
    a.transient = extrapolate(lengths, k.transient, seq_len);
    a.split_pending = extrapolate(lengths, k.split_pending, seq_len);
    a.saved_checkpointed = head ? a.saved : extrapolate(lengths, k.saved_checkpointed, seq_len);
    profile.kinds.push_back(a);
  }
  return profile;
}

ActivationProfile probe_activations(const model::ModelConfig& config,
                                    const model::LoraConfig& lora, int64_t micro_batch,
                                    int64_t seq_len, model::Precision precision,
                                    model::BaseDtype base, bool flat_buffers,
                                    const c10::Device& device, const MemoryProbe& memory,
                                    bool split_backward) {
  return extrapolate_profile(
      measure_activations(config, lora, micro_batch, probe_lengths(config, seq_len), precision,
                          base, flat_buffers, device, memory, split_backward),
      config, seq_len);
}

model::ModelConfig tp_rank_config(const model::ModelConfig& config, int tp) {
  model::ModelConfig c = config;
  if (tp <= 1) return c;
  c.attn_heads /= tp;
  c.attn_kv_heads /= tp;
  c.gdn_heads /= tp;
  if (c.gdn_key_heads > 0) c.gdn_key_heads /= tp;  // Qwen3.5: whole key heads a rank
  c.mlp_hidden /= tp;
  if (c.gdn_dconv_reduction % tp == 0) c.gdn_dconv_reduction /= tp;
  return c;
}

ActivationParts activation_parts(const ActivationProfile& profile, const model::ModelConfig& config,
                                 int64_t first_block, int64_t end_block, bool has_head) {
  const bool checkpointing = config.activation_checkpointing;
  const auto unknown = [] {  // a layer without a measured profile: every figure unknown
    const double nan = std::nan("");
    ActivationParts u;
    u.held = u.split_pending = u.working = nan;
    u.layer_working = u.head_working = u.head_saved = nan;
    return u;
  };
  ActivationParts parts;
  // per micro-batch alive: the chunk's input (a received activation, or the embedding's output;
  // that one only where a gradient flows into it or a checkpoint keeps it: with a frozen
  // embedding nothing in the first block saves its input)
  const bool input_kept = first_block > 0 || checkpointing || profile.embedding_trains;
  parts.held = input_kept ? profile.input_bytes : 0.0;
  std::vector<const LayerActivation*> layers;
  for (int64_t l = first_block; l < end_block; ++l) {
    const LayerActivation* a = profile.find(std::string(1, config.pattern.at(size_t(l))));
    if (!a) return unknown();
    layers.push_back(a);
    parts.held += checkpointing ? a->saved_checkpointed : a->saved;
    parts.split_pending += a->split_pending;
  }
  const LayerActivation* h = has_head ? profile.find("head") : nullptr;
  if (has_head && !h) return unknown();
  if (h) {
    parts.held += h->saved;
    parts.split_pending += h->split_pending;
    parts.head_saved = h->saved;
    parts.head_working = h->transient;
  }
  // Backward runs the head, then the blocks from the last: while block l's backward runs, what
  // the head and the blocks after l saved is freed already. Checkpointing: block l's kept output
  // (the next block's checkpointed input) is freed too, and its recompute holds its whole saved
  // set beside its backward's transient. So, relative to `held`:
  //   working_l = saved_l (recompute) or 0, + transient_l - sum_{j > l} kept_j - head saved
  //               - (checkpointing: kept_l)
  // Without a head (a pipeline chunk that sends its output on), the chunk's output [B, T, D]
  // stays until the chunk's backward is over: the pipeline backpropagates from it.
  double later = parts.head_saved;  // kept by what comes after block l
  parts.layer_working = -std::numeric_limits<double>::infinity();
  parts.block_working.assign(layers.size(), 0.0);
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerActivation* a = layers[i];
    const double kept = checkpointing ? a->saved_checkpointed : a->saved;
    double w = checkpointing ? a->saved + a->transient - kept - later : a->transient - later;
    if (!h && (checkpointing || i + 1 < layers.size())) w += profile.input_bytes;
    parts.layer_working = std::max(parts.layer_working, w);
    parts.block_working[i] = w;
    later += kept;
  }
  parts.working = parts.layer_working;
  if (h) parts.working = std::max(parts.working, h->transient);
  if (layers.empty()) parts.layer_working = parts.working = h ? h->transient : 0.0;
  return parts;
}

RankActivation predict_activation(const ActivationProfile& profile, const model::ModelConfig& config,
                                  int64_t first_block, int64_t end_block, bool has_head,
                                  int64_t in_flight, const parallel::WorkingSet& working_set) {
  const ActivationParts parts = activation_parts(profile, config, first_block, end_block, has_head);
  const double held = double(std::max<int64_t>(1, in_flight)) * parts.held;
  if (!has_head) return {held + parts.working, working_set.max(), 0.0};
  // The head's backward runs first and frees what its forward saved before any block's backward
  // runs: the peak is at the head's backward (everything held plus its working set) or later, in
  // a block's backward (or recompute), without the head's saved tensors. The strategy's working
  // set differs between the two phases (fsdp: no block is gathered during the head's backward).
  const RankActivation head{held + parts.head_working, working_set.head, 0.0};
  // a strategy that keeps each block's output [B, T, D] through its backward (fsdp's block
  // function) holds it beside a checkpointed block's recompute too
  const double kept_output =
      config.activation_checkpointing && working_set.block_outputs_kept ? profile.input_bytes : 0.0;
  RankActivation block{held + parts.layer_working + kept_output, working_set.block,
                       working_set.block_comm};
  if (!working_set.blocks.empty() && working_set.blocks.size() == parts.block_working.size()) {
    // the working set differs from block to block (fsdp, fsdp2): the peak is the largest sum
    // over the blocks of each block's activations and its own working set, not the sum of the
    // two largest (which may fall in different blocks)
    double best = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < parts.block_working.size(); ++i) {
      const double total = parts.block_working[i] + working_set.blocks[i];
      if (total <= best) continue;
      best = total;
      block = {held + parts.block_working[i] + kept_output, working_set.blocks[i],
               working_set.blocks_comm[i]};
    }
  }
  if (std::isnan(head.total()) || std::isnan(block.total())) return {std::nan(""), 0.0, 0.0};
  return head.total() >= block.total() ? head : block;
}

double predict_stage_activation_bytes(const std::vector<ActivationParts>& chunks,
                                      const std::vector<parallel::PipeAction>& actions) {
  double working = 0;
  for (const auto& c : chunks) working = std::max(working, c.working);
  return parallel::peak_alive(
             actions, [&](int c) { return chunks.at(size_t(c)).held; },
             [&](int c) { return chunks.at(size_t(c)).split_pending; }) +
         working;
}

double cp_activation_extra_bytes(const model::ModelConfig& c, int64_t micro_batch,
                                 int64_t transition_tokens) {
  if (c.activation_checkpointing) return 0.0;
  int64_t g_layers = 0;
  for (int64_t l = 0; l < c.num_layers(); ++l)
    g_layers += c.layer_kind(l) == model::LayerKind::gated_delta ? 1 : 0;
  const double dk = double(c.gdn_head_dim_k), chunk = double(c.gdn_chunk);
  return double(g_layers) * double(micro_batch) * double(transition_tokens) *
         double(c.gdn_heads) * dk * (2.0 + dk / chunk) * 4.0;
}

RankActivation predict_rank_activation(const ActivationProfile& profile,
                                       const model::ModelConfig& config, int tp,
                                       const parallel::PipeSpec* spec,
                                       const std::vector<int64_t>* first_block,
                                       const std::vector<int64_t>* end_block, int stage,
                                       int64_t micro_batch, int64_t cp_transition_tokens,
                                       const parallel::WorkingSet& working_set) {
  RankActivation out;
  if (spec && spec->stages > 1) {
    // every chunk of this stage, composed over the stage's schedule table; a pipeline's
    // working set (fsdp2: the stage gathered whole) is the same in every phase
    std::vector<ActivationParts> chunks;
    for (int chunk = 0; chunk < spec->chunks; ++chunk) {
      const size_t g = size_t(spec->virtual_stage(stage, chunk));
      chunks.push_back(activation_parts(profile, config, first_block->at(g), end_block->at(g),
                                        end_block->at(g) == config.num_layers()));
    }
    out = {predict_stage_activation_bytes(chunks, parallel::stage_actions(*spec, stage)),
           working_set.max(), 0.0};
  } else {
    out = predict_activation(profile, config, 0, config.num_layers(), true, 1, working_set);
  }
  if (cp_transition_tokens > 0)
    out.activations +=
        cp_activation_extra_bytes(tp_rank_config(config, tp), micro_batch, cp_transition_tokens);
  return out;
}

}  // namespace hlp::train
