#include "train/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/error.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/device_peak.h"
#include "metrics/torch_info.h"
#include "model/accounting.h"
#include "model/context_shard.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/sharded_unit.h"
#include "parallel/stage_split.h"
#include "parallel/tensor_parallel.h"
#include "train/memory_limit.h"
#include "train/trainer.h"

namespace hlp::train {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The CUDA context (kernels of LibTorch and its libraries, cuBLAS workspace, NCCL's own
// buffers) lives outside the caching allocator that hlp-train's peak measures. An estimate for
// CUDA 12 with lazy module loading, not measured on this GPU-less machine.
constexpr double kCudaContextBytes = 0.75 * kGiB;
// The caching allocator rounds blocks (512 B small, 2 MiB large segments) and fragments: a
// fraction of the allocator peak, estimated.
constexpr double kAllocatorRounding = 0.05;
// A GPU's compute efficiency where no GPU run of HLP has calibrated it (docs/planning.md).
constexpr double kAssumedGpuEfficiency = 0.35;

struct DeviceRow {
  const char* name;
  double memory_bytes;
  const char* cuda_name;  // for metrics::gpu_peak_flops (device_peak.h)
  double link_bytes_per_s;
  const char* link;
  double efficiency = kAssumedGpuEfficiency;  // fraction of the peak a training step reaches
  const char* efficiency_source = "assumed";
};

// Nominal capacities (V100 / A100 / H100: GiB of HBM; H200: 141 GB); per-rank ring bandwidth:
// half the GPU's aggregate NVLink bandwidth of its datasheet (each GPU sends and receives),
// PCIe 4.0 x16 for the L40S.
const std::vector<DeviceRow>& device_rows() {
  static const std::vector<DeviceRow> rows = {
      {"v100-16", 16 * kGiB, "Tesla V100-SXM2-16GB", 150e9, "NVLink 2: 300 GB/s a GPU"},
      {"v100-32", 32 * kGiB, "Tesla V100-SXM2-32GB", 150e9, "NVLink 2: 300 GB/s a GPU"},
      {"a100-40", 40 * kGiB, "NVIDIA A100-SXM4-40GB", 300e9, "NVLink 3: 600 GB/s a GPU"},
      {"a100-80", 80 * kGiB, "NVIDIA A100-SXM4-80GB", 300e9, "NVLink 3: 600 GB/s a GPU"},
      // efficiency: hlp-plan --calibrate of HLP's own runs on a lent H100 (docs/gpu-results.md)
      {"h100-80", 80 * kGiB, "NVIDIA H100 80GB HBM3", 450e9, "NVLink 4: 900 GB/s a GPU", 0.037,
       "measured: hlp-plan --calibrate of 3 runs, jet-nemotron-2b LoRA bf16 T 4096, 2026-11-27"},
      {"h200", 141e9, "NVIDIA H200", 450e9, "NVLink 4: 900 GB/s a GPU"},
      {"l40s-48", 48 * kGiB, "NVIDIA L40S", 25e9, "PCIe 4.0 x16: 32 GB/s"},
  };
  return rows;
}

bool is_block_param(const std::string& name) { return name.rfind("blocks.", 0) == 0; }

int64_t block_of(const std::string& name) { return std::stoll(name.substr(7)); }

}  // namespace

const std::vector<std::string>& plan_device_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& r : device_rows()) n.push_back(r.name);
    n.push_back("cpu");
    return n;
  }();
  return names;
}

std::string plan_device_of(const std::string& kind, const std::string& name) {
  if (kind == "cpu") return "cpu";
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return "h200";
  if (has("H100")) return "h100-80";
  if (has("A100")) return has("80") ? "a100-80" : "a100-40";
  if (has("V100")) return has("32") ? "v100-32" : "v100-16";
  if (has("L40S")) return "l40s-48";
  return "";
}

PlanDevice plan_device(const std::string& name, model::Precision precision, int ranks,
                       double peak_flops, const std::string& peak_source) {
  PlanDevice d;
  d.name = name;
  if (name == "cpu") {
    const HostMemory host = host_memory();
    const int64_t usable = host.usable_bytes();
    d.memory_bytes = usable > 0 ? double(usable) / std::max(1, ranks) : 0;
    d.memory_source = host.source() + " / " + std::to_string(ranks) + " rank(s)";
    if (peak_flops > 0) {
      d.peak_flops = peak_flops;
      d.peak_source = peak_source;
    } else {
      const auto peak = metrics::measure_cpu_peak_flops(0.3);
      d.peak_flops = peak.flops_per_s;
      d.peak_source = peak.source;
    }
    d.efficiency = 0.5;
    d.efficiency_source = "assumed";
    d.link_bytes_per_s = 5e9;
    d.link_latency_s = 5e-6;
    d.link_source = "MPI shared memory, 5 GB/s and 5 us: assumed";
    return d;
  }
  for (const auto& r : device_rows()) {
    if (name != r.name) continue;
    d.memory_bytes = r.memory_bytes;
    d.memory_source = "nominal capacity of the " + name;
    d.reserve_bytes = kCudaContextBytes;
    d.rounding = kAllocatorRounding;
    const auto peak = metrics::gpu_peak_flops(r.cuda_name, precision == model::Precision::fp32
                                                               ? metrics::PeakPrecision::fp32
                                                               : metrics::PeakPrecision::half);
    d.peak_flops = peak ? peak->flops_per_s : 0;
    d.peak_source = peak ? peak->source : "unknown";
    d.efficiency = r.efficiency;
    d.efficiency_source = r.efficiency_source;
    d.link_bytes_per_s = r.link_bytes_per_s;
    d.link_latency_s = 10e-6;
    d.link_source = std::string(r.link) + ", half of it a direction per rank; 10 us a message";
    return d;
  }
  std::string all;
  for (const auto& n : plan_device_names()) all += (all.empty() ? "" : ", ") + n;
  throw user_error("--gpu ", name, " is not known; use one of: ", all);
}

std::string PlanCandidate::name() const {
  std::string s = spec().name() + " n=" + std::to_string(ranks);
  if (pp > 1) {
    s += std::string(" ") + to_string(pp_schedule);
    if (pp_virtual > 1) s += " V" + std::to_string(pp_virtual);
  }
  if (cp > 1)
    s += std::string(" G ") + to_string(cp_scheme) + " attn " + to_string(cp_attention);
  return s;
}

std::vector<PlanCandidate> plan_candidates(int ranks, const model::ModelConfig& config,
                                           const TrainConfig& train,
                                           const std::vector<parallel::StrategyKind>& strategies) {
  std::vector<PlanCandidate> out;
  for (const parallel::StrategySpec& spec : parallel::single_axis_meshes(ranks)) {
    if (!strategies.empty() &&
        std::find(strategies.begin(), strategies.end(), spec.strategy) == strategies.end())
      continue;
    PlanCandidate c;
    c.strategy = spec.strategy;
    c.ranks = spec.strategy == parallel::StrategyKind::single ? 1 : ranks;
    c.pp = spec.pp;
    c.tp = spec.tp;
    c.cp = spec.cp;
    c.ep = spec.ep;
    c.dp = c.ranks / spec.model_ranks();
    parallel::RunFacts facts;  // what the mesh alone decides (LoRA dropout: plan()'s row)
    facts.model = &config;
    facts.seq_len = train.seq_len;
    facts.cp_layout = train.cp_layout;
    try {  // M; unknown (0) when the batch does not split over this dp (plan() says so)
      facts.micro_batches = split_batch(train, c.dp).micro_batches;
    } catch (const UserError&) {
    }
    if (c.cp > 1) {  // each exchange scheme of the layer kinds the model has, where it runs
      const auto [has_gdn, has_attention] = parallel::mixing_layers(config);
      for (const auto& g : parallel::kCpSchemeNames) {
        if (!has_gdn && g.value != parallel::CpScheme::chain) continue;
        for (const auto& a : parallel::kCpAttentionNames) {
          if (!has_attention && a.value != parallel::CpAttention::ring) continue;
          c.cp_scheme = facts.cp_scheme = g.value;
          c.cp_attention = facts.cp_attention = a.value;
          if (parallel::check_run(spec, facts).empty()) out.push_back(c);
        }
      }
      continue;
    }
    if (c.pp == 1) {
      if (parallel::check_run(spec, facts).empty()) out.push_back(c);
      continue;
    }
    for (const auto& schedule : parallel::kPipeScheduleNames) {
      c.pp_schedule = facts.pp_schedule = schedule.value;
      c.pp_virtual = facts.pp_virtual =
          schedule.value == parallel::PipeSchedule::interleaved ? 2 : 1;
      if (parallel::check_run(spec, facts).empty()) out.push_back(c);
    }
  }
  return out;
}

HeldPrediction predict_held(const PlanCandidate& c, const model::ModelConfig& config,
                            const model::LoraConfig& lora, model::BaseDtype base,
                            int64_t seq_len, const std::string& pp_split, int stage,
                            int dp_rank) {
  const auto table = model::parameter_table(config, lora);
  const int64_t L = config.num_layers();
  const bool pipeline = c.pp > 1 || c.tp > 1;
  const int dp = c.dp * c.cp;  // gradients and shards are over dp x cp
  auto element_bytes = [&](const model::ParamSpec& p) {  // as stored (model/precision.h)
    return model::parameter_element_bytes(p.trainable, int64_t(p.shape.size()), base);
  };
  HeldPrediction h;
  if (!pipeline && c.spec().dp_kind() == parallel::DpKind::fsdp) {
    // flat units: root + one per block; in each, one flat buffer per storage dtype (in order of
    // appearance), sharded ceil(N_g / n); gradients for the buffers with a trainable member;
    // AdamW over the trainable elements in this rank's range of their buffer
    std::map<int64_t, std::vector<const model::ParamSpec*>> units;
    for (const auto& p : table) units[is_block_param(p.name) ? block_of(p.name) + 1 : 0].push_back(&p);
    std::vector<parallel::UnitSize> sizes;
    for (const auto& [u, params] : units) {
      std::vector<int64_t> group_bytes;  // element bytes of each buffer, in order
      for (const auto* p : params)
        if (std::find(group_bytes.begin(), group_bytes.end(), element_bytes(*p)) ==
            group_bytes.end())
          group_bytes.push_back(element_bytes(*p));
      std::vector<parallel::UnitParam> unit;
      for (const auto* p : params) unit.push_back({p->numel, 1, p->trainable, element_bytes(*p)});
      for (int64_t bytes : group_bytes) {
        int64_t n = 0;
        bool trains = false;
        for (const auto* p : params)
          if (element_bytes(*p) == bytes) {
            n += p->numel;
            trains = trains || p->trainable;
          }
        const int64_t shard = (n + dp - 1) / dp, begin = int64_t(dp_rank) * shard;
        const int64_t end = begin + shard;
        h.params += double(bytes) * double(shard);
        if (trains) h.grads += double(bytes) * double(shard);
        int64_t offset = 0;
        for (const auto* p : params) {
          if (element_bytes(*p) != bytes) continue;
          if (p->trainable) {
            const int64_t lo = std::max(offset, begin), hi = std::min(offset + p->numel, end);
            if (hi > lo) h.optimizer += 8.0 * double(hi - lo);
          }
          offset += p->numel;
        }
      }
      sizes.push_back(parallel::unit_size(unit, dp, /*per_parameter=*/false));
    }
    h.working_set = parallel::sharded_working_set(sizes, dp, false);
    return h;
  }
  // The parameters this rank holds: a stage's chunks (pipeline) or all, each tp-sliced.
  std::vector<std::pair<const model::ParamSpec*, std::vector<int64_t>>> held;
  std::vector<bool> has_layer(size_t(L + 2), !pipeline);
  if (pipeline) {
    const int chunks = c.pp_virtual;
    const auto split = parallel::split_stages(config, lora, seq_len, c.pp * chunks, pp_split);
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const size_t g = size_t(chunk * c.pp + stage);
      for (int64_t b = split.first_block[g]; b < split.end_block[g]; ++b) has_layer[size_t(b + 1)] = true;
      if (split.first_block[g] == 0) has_layer[0] = true;
      if (split.end_block[g] == L) has_layer[size_t(L + 1)] = true;
    }
  }
  // --ep: this rank's routed experts (every rank holds E / ep of them: the first slice stands
  // for all)
  const int64_t local_experts = c.ep > 1 ? config.moe_experts / c.ep : config.moe_experts;
  auto expert_of = [](const std::string& name) -> int64_t {
    const size_t at = name.find("mlp.experts.");
    return at == std::string::npos ? -1 : std::stoll(name.substr(at + 12));
  };
  for (const auto& p : table) {
    if (expert_of(p.name) >= local_experts) continue;
    bool mine = has_layer[size_t(p.layer)];
    // tied embeddings: the stage with the head holds the matrix too
    if (p.name == "embed_tokens.weight" && config.tied_embeddings && has_layer[size_t(L + 1)]) mine = true;
    if (!mine) continue;
    std::vector<int64_t> shape = p.shape;
    const int64_t dim = c.tp > 1 ? parallel::tp_split_dim(p.name) : -1;
    if (dim >= 0) shape[size_t(dim)] /= c.tp;
    held.emplace_back(&p, shape);
  }
  const bool sharded = c.spec().dp_kind() == parallel::DpKind::fsdp2;
  std::map<int64_t, std::vector<parallel::UnitParam>> units;  // fsdp2 without pipeline
  double stage_full = 0;  // fsdp2 in a pipeline: the stage, gathered whole
  for (const auto& [p, shape] : held) {
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    double elements = double(numel);
    const int64_t d0 = shape.empty() ? 1 : shape[0];
    const bool expert = expert_of(p->name) >= 0;
    // fsdp2: the routed experts over their replicas (dp cp / ep), the rest over dp cp
    const int shard_over = expert && c.ep > 1 ? dp / c.ep : dp;
    if (sharded) elements = double(parallel::per_parameter_shard(d0, numel, shard_over));
    const double bytes = double(element_bytes(*p));
    h.params += bytes * elements;
    if (expert) h.expert_params += bytes * elements;
    if (p->trainable) {
      h.grads += 4.0 * elements;
      h.optimizer += 8.0 * elements;
    }
    if (!sharded) continue;
    stage_full += bytes * double(numel) + (p->trainable ? 4.0 * double(numel) : 0.0);
    units[is_block_param(p->name) ? block_of(p->name) + 1 : 0].push_back(
        {numel, d0, p->trainable, element_bytes(*p)});
  }
  if (sharded && pipeline) {
    // a pipeline's fsdp2 unit gathers the stage once before the step and reduces after it,
    // outside the activation peak: no communication buffers at the peak
    h.working_set.head = h.working_set.block = stage_full;
  } else if (sharded) {
    std::vector<parallel::UnitSize> sizes;
    for (int64_t u = 0; u <= L; ++u)
      sizes.push_back(parallel::unit_size(units[u], dp, /*per_parameter=*/true));
    h.working_set = parallel::sharded_working_set(sizes, dp, true);
  }
  return h;
}

namespace {

// Ring all-reduce / all-gather / reduce-scatter over n ranks, alpha-beta.
double ring_s(double bytes, int n, double factor, const PlanDevice& d) {
  if (n <= 1 || bytes <= 0) return 0;
  return factor * double(n - 1) / n * bytes / d.link_bytes_per_s + 2.0 * (n - 1) * d.link_latency_s;
}

// The whole model's parameters as stored, and, under flat fsdp, its flat buffers that require
// grad (one per storage dtype of a unit, requiring grad when a member trains): their bytes and
// the frozen elements in them, whose weight gradients autograd then computes too.
struct StoredModel {
  double bytes = 0;                 // every parameter as stored
  double flat_grad_bytes = 0;       // flat fsdp: the gradient buffers (unsharded)
  int64_t flat_frozen_with_grad = 0;  // flat fsdp: frozen elements in those buffers
};
StoredModel stored_model(const model::ModelConfig& config, const model::LoraConfig& lora,
                         model::BaseDtype base) {
  StoredModel m;
  std::map<std::pair<int64_t, int64_t>, std::pair<bool, std::vector<const model::ParamSpec*>>>
      buffers;  // (unit, element bytes) -> (a member trains, members)
  const auto table = model::parameter_table(config, lora);
  for (const auto& p : table) {
    const int64_t bytes = model::parameter_element_bytes(p.trainable, int64_t(p.shape.size()), base);
    m.bytes += double(bytes) * double(p.numel);
    auto& buffer = buffers[{is_block_param(p.name) ? block_of(p.name) + 1 : 0, bytes}];
    buffer.first = buffer.first || p.trainable;
    buffer.second.push_back(&p);
  }
  for (const auto& [key, buffer] : buffers) {
    if (!buffer.first) continue;
    for (const auto* p : buffer.second) {
      m.flat_grad_bytes += double(key.second) * double(p->numel);
      if (!p->trainable) m.flat_frozen_with_grad += p->numel;
    }
  }
  return m;
}

// The routed experts alone, as stored: `bytes` every expert's parameters, `flat_grad_bytes`
// (reused) their trainable ones in fp32.
StoredModel stored_experts(const model::ModelConfig& config, const model::LoraConfig& lora,
                           model::BaseDtype base) {
  StoredModel m;
  for (const auto& p : model::parameter_table(config, lora)) {
    if (p.name.find("mlp.experts.") == std::string::npos) continue;
    m.bytes += double(model::parameter_element_bytes(p.trainable, int64_t(p.shape.size()), base)) *
               double(p.numel);
    if (p.trainable) m.flat_grad_bytes += 4.0 * double(p.numel);
  }
  return m;
}

// One sparse layer's all-to-alls for one micro-batch of B x T tokens on a rank of an expert
// group of ep: dispatch and combine, forward and backward, each (ep - 1) / ep of the B T K rows
// of D elements of `element_bytes` (an even router), plus ep - 1 latencies each.
double all_to_all_s(int64_t B, int64_t T, const model::ModelConfig& m, int ep,
                    double element_bytes, const PlanDevice& d) {
  if (ep <= 1) return 0;
  const double rows = double(B) * double(T) * double(m.moe_top_k) * double(ep - 1) / double(ep);
  const double bytes = rows * double(m.hidden) * element_bytes;
  return 4.0 * (bytes / d.link_bytes_per_s + double(ep - 1) * d.link_latency_s);
}

// Seconds of one micro-batch's context-parallel exchanges (forward + backward) under the
// candidate's schemes, each layer kind as docs/strategies.md ("Context parallelism") counts
// its bytes: a message is bytes / link + latency; exchanges of one step in parallel on every
// boundary cost one message, a chain of them one each. Activations as the layers hold them
// (2 bytes under bf16 / fp16 autocast, else 4); states, transitions and ring attention's
// blocks in fp32 (they are computed in it).
double cp_exchange_s(const PlanInputs& in, const PlanCandidate& c, int64_t B) {
  if (c.cp <= 1) return 0;
  const model::ModelConfig& m = in.model;
  const PlanDevice& d = in.device;
  const int p = c.cp;
  const bool zigzag = in.train.cp_layout == parallel::CpLayout::zigzag;
  const double pieces = double(model::seq_piece_count(p, zigzag));
  const double b = double(B), L = double(in.train.seq_len / p);
  const double act = in.train.precision == model::Precision::fp32 ? 4.0 : 2.0;
  auto hop = [&](double bytes) { return bytes / d.link_bytes_per_s + d.link_latency_s; };
  // a rank's whole tensor re-sharded: (p - 1) / p of it leaves, one message to each other rank
  auto a2a = [&](double bytes) {
    return double(p - 1) / p * bytes / d.link_bytes_per_s + double(p - 1) * d.link_latency_s;
  };
  // an all-gather of `bytes` from every rank: (p - 1) of them arrive
  auto gather = [&](double bytes) {
    return double(p - 1) * bytes / d.link_bytes_per_s + double(p - 1) * d.link_latency_s;
  };
  const double H = double(m.gdn_heads / c.tp), dk = double(m.gdn_head_dim_k),
               dv = double(m.gdn_head_dim_v);
  const double conv_channels =
      m.gdn_variant == model::GdnVariant::jetblock ? H * dv : 2 * H * dk + H * dv;
  double g_layer = 2 * hop(b * double(m.gdn_conv_width - 1) * conv_channels * act);  // halo
  switch (c.cp_scheme) {
    case parallel::CpScheme::chain:  // a state a boundary, one after the other, each way
      g_layer += 2 * (pieces - 1) * hop(4 * b * H * dk * dv);
      break;
    case parallel::CpScheme::allgather:  // (M, Q) forward, R dO backward, a rank's pieces
      g_layer += gather(pieces / p * 4 * b * H * dk * (dk + dv)) +
                 gather(pieces / p * 4 * b * H * dk * dv);
      break;
    case parallel::CpScheme::alltoall:  // q | k | v and beta | g in, o out; backward alike
      g_layer += 2 * (a2a(b * L * H * ((2 * dk + dv) * act + 2 * 4)) + a2a(b * L * H * dv * act));
      break;
  }
  const double Ha = double(m.attn_heads / c.tp), kv = double(m.attn_kv_heads / c.tp),
               hd = double(m.attn_head_dim);
  double a_layer = 0, s_layer = 0;
  if (c.cp_attention == parallel::CpAttention::ring) {
    // A: (p - 1) + (2p - 1) shifts of a rank's K, V; S: a window - 1 halo of K | V each way
    a_layer = double(3 * p - 2) * hop(2 * 4 * b * L * kv * hd);
    s_layer = 2 * hop(b * double(std::max<int64_t>(0, m.window - 1)) * 2 * kv * hd * 4);
  } else {  // q | k | v in (KV heads repeated to divide), the output out; backward alike
    const double kv_sent =
        kv * double(std::max<int64_t>(1, model::attention_kv_repeat(int64_t(Ha), int64_t(kv), p)));
    a_layer = s_layer = 2 * (a2a(b * L * (Ha + 2 * kv_sent) * hd * act) + a2a(b * L * Ha * hd * act));
  }
  return double(m.count_layers(model::LayerKind::gated_delta)) * g_layer +
         double(m.count_layers(model::LayerKind::full_attention)) * a_layer +
         double(m.count_layers(model::LayerKind::sliding_window)) * s_layer;
}

}  // namespace

void predict_time(PlanRow& row, const PlanInputs& in, const parallel::StageSplit* split,
                  const BatchSplit& batch) {
  const int64_t micro = batch.micro_batches;
  const TrainConfig& t = in.train;
  const PlanCandidate& c = row.candidate;
  const int64_t tokens_global = int64_t(t.global_batch) * t.seq_len;
  const bool flat = c.spec().dp_kind() == parallel::DpKind::fsdp && !c.spec().model_parallel();
  std::optional<parallel::PipeSpec> spec;
  if (c.pp > 1) spec = parallel::PipeSpec{c.pp_schedule, c.pp, c.pp_virtual, int(micro)};
  // time: this rank's share of the executed FLOPs (cp: with the G layers' transition pass)
  const auto flops = model::training_flops_per_token(
      in.model, in.lora, t.seq_len,
      parallel::runs_transition_pass(c.cp_scheme)
          ? model::seq_piece_count(c.cp, t.cp_layout == parallel::CpLayout::zigzag)
          : 1);
  const double model_ranks = double(c.pp) * c.tp * c.cp;
  double stage_share = 1.0 / c.pp;
  if (split) {
    double total = 0, most = 0;
    for (double s : split->stage_cost) total += s;
    for (int s = 0; s < c.pp; ++s) {
      double mine = 0;
      for (int v = 0; v < c.pp_virtual; ++v) mine += split->stage_cost[size_t(v * c.pp + s)];
      most = std::max(most, mine);
    }
    if (total > 0) stage_share = most / total;
  }
  // flat fsdp: a FlatParameter with a trainable member requires grad as a whole, so autograd
  // also computes the weight gradients of its frozen members, 2 FLOPs per weight and token more
  // than LoRA executes
  const auto counts = model::count_parameters(in.model, in.lora);
  const StoredModel stored =
      stored_model(in.model, in.lora, model::resolve_base_dtype(t.base_dtype, t.precision));
  const double executed =
      flops.executed_per_token + (flat ? 2.0 * double(stored.flat_frozen_with_grad) : 0.0);
  const double rank_flops = executed * double(tokens_global) / c.dp * stage_share * c.pp / model_ranks;
  row.compute_s = rank_flops / std::max(1.0, in.device.peak_flops * in.device.efficiency);
  const double trainable_bytes = 4.0 * double(counts.trainable);
  const double total_bytes = stored.bytes;  // frozen matrices in the base dtype
  const double activation_msg =
      4.0 * double(batch.micro_batch) * double(t.seq_len / c.cp) * double(in.model.hidden);
  const int dpc = c.dp * c.cp;
  double comm = 0;
  if (flat)  // gathered forward and backward, the gradient buffers reduce-scattered
    comm = ring_s(total_bytes / model_ranks, dpc, 2.0, in.device) +
           ring_s(stored.flat_grad_bytes / model_ranks, dpc, 1.0, in.device);
  else if (c.ep > 1) {
    // the routed experts: E / ep of them a rank, gathered and reduced over their replicas
    const StoredModel experts = stored_experts(in.model, in.lora,
                                               model::resolve_base_dtype(t.base_dtype, t.precision));
    const double rest = total_bytes - experts.bytes, rest_trainable = trainable_bytes - experts.flat_grad_bytes;
    const int replicas = dpc / c.ep;
    const double e_bytes = experts.bytes / c.ep / model_ranks;
    const double e_trainable = experts.flat_grad_bytes / c.ep / model_ranks;
    if (c.spec().dp_kind() == parallel::DpKind::fsdp2)
      comm = ring_s(rest / model_ranks, dpc, 2.0, in.device) +
             ring_s(rest_trainable / model_ranks, dpc, 1.0, in.device) +
             ring_s(e_bytes, replicas, 2.0, in.device) + ring_s(e_trainable, replicas, 1.0, in.device);
    else
      comm = ring_s(rest_trainable / model_ranks, dpc, 2.0, in.device) +
             ring_s(e_trainable, replicas, 2.0, in.device);
    row.all_to_all_s = double(micro) * double(in.model.count_moe_layers()) / c.pp *
                       all_to_all_s(batch.micro_batch, t.seq_len / c.cp, in.model, c.ep,
                                    /*element_bytes=*/4.0,  // fp32, as activation_msg above
                                    in.device);
    comm += row.all_to_all_s;
  } else if (c.spec().dp_kind() == parallel::DpKind::fsdp2)
    comm = ring_s(total_bytes / model_ranks, dpc, 2.0, in.device) +
           ring_s(trainable_bytes / model_ranks, dpc, 1.0, in.device);
  else comm = ring_s(trainable_bytes / model_ranks, dpc, 2.0, in.device);
  if (c.tp > 1)  // two all-reduces of [B, T, D] per block half, forward and backward
    comm += double(micro) * 4.0 * double(in.model.num_layers()) / c.pp *
            ring_s(activation_msg, c.tp, 2.0, in.device);
  if (c.pp > 1)
    comm += double(micro) * 2.0 * (activation_msg / in.device.link_bytes_per_s + in.device.link_latency_s);
  if (c.cp > 1) {
    row.cp_exchange_s = double(micro) * cp_exchange_s(in, c, batch.micro_batch);
    comm += row.cp_exchange_s;
  }
  row.comm_s = comm;
  if (spec) {
    const bool full = in.lora.full_finetune();
    row.bubble = parallel::bubble_theory(*spec, 1.0, spec->splits_backward() ? (full ? 1.0 : 1.9) : 2.0,
                                         spec->splits_backward() ? (full ? 1.0 : 0.1) : 0.0);
  }
  row.step_s = row.compute_s / (1.0 - row.bubble) + row.comm_s;
  row.tokens_per_s = row.step_s > 0 ? double(tokens_global) / row.step_s : 0;
}

PlanCandidate candidate_of_run(const TrainConfig& train, int world) {
  const TrainConfig c = with_parallel_defaults(train, world);
  PlanCandidate cand;
  cand.strategy = c.strategy;
  cand.ranks = world;
  cand.tp = c.tp;
  cand.pp = c.pp;
  cand.cp = c.cp;
  cand.ep = c.ep;
  cand.dp = std::max(1, world / (c.tp * c.pp * c.cp));
  if (c.cp > 1) {
    cand.cp_scheme = c.cp_scheme;
    cand.cp_attention = c.cp_attention;
  }
  if (c.pp > 1) {
    cand.pp_schedule = c.pp_schedule;
    cand.pp_virtual = c.pp_virtual;
  }
  return cand;
}

RunShape run_shape(const PlanInputs& in, int world) {
  RunShape shape;
  shape.candidate = candidate_of_run(in.train, world);
  const PlanCandidate& c = shape.candidate;
  shape.batch = split_batch(in.train, c.dp);
  if (c.pp > 1)
    shape.split = parallel::split_stages(in.model, in.lora, in.train.seq_len, c.pp * c.pp_virtual,
                                         in.train.pp_split);
  return shape;
}

std::vector<PlanRow> plan(const PlanInputs& in, const std::vector<PlanCandidate>& candidates,
                          ProbeCache* cache) {
  const TrainConfig& t = in.train;
  // What the probe runs in: the target's precision, with its bytes per element. On a GPU, fp16
  // is CUDA autocast: 2-byte copies of the matmuls' operands, float32 copies where its fp32 ops
  // and regions begin. This CPU has no float16 autocast; its fp16 emulation keeps float32
  // tensors holding fp16 values and makes none of those casts (model/half_emulation.h: right for
  // hlp-train's own CPU fp16 runs). A GPU fp16 candidate is therefore probed under bfloat16
  // autocast, which makes the same casts to a 2-byte type as CUDA autocast does.
  model::Precision precision = t.precision;
  const model::BaseDtype stored = model::resolve_base_dtype(t.base_dtype, t.precision);
  model::BaseDtype base = stored;  // what the probe stores frozen matrices in
  if (precision == model::Precision::fp16 && in.device.name != "cpu") {
    precision = model::Precision::bf16;
    // fp16 frozen matrices are probed as bf16 ones: the same 2 bytes, and the CPU has no fp16
    // GEMM to use them as stored
    if (base == model::BaseDtype::fp16) base = model::BaseDtype::bf16;
  }
  const MemoryProbe probe{[] { return metrics::CpuAllocatorCounter::current_bytes(); },
                          [] { return metrics::CpuAllocatorCounter::peak_bytes(); },
                          [] { metrics::CpuAllocatorCounter::reset_peak(); }};
  ProbeCache local;
  std::map<std::string, ActivationSamples>& measured = (cache ? cache : &local)->samples;
  std::vector<PlanRow> rows;
  for (const auto& c : candidates) {
    PlanRow row;
    row.candidate = c;
    BatchSplit batch;  // hlp-train's own split of the global batch over the dp ranks
    try {
      batch = split_batch(t, c.dp);
    } catch (const UserError& e) {
      row.problem = e.what();
      rows.push_back(row);
      continue;
    }
    const int64_t micro = batch.micro_batches;
    parallel::RunFacts facts;  // what hlp-train refuses for this mesh, with its message
    facts.model = &in.model;
    facts.lora_dropout = in.lora.dropout;
    facts.seq_len = t.seq_len;
    facts.cp_layout = t.cp_layout;
    facts.cp_scheme = c.cp_scheme;
    facts.cp_attention = c.cp_attention;
    facts.pp_schedule = c.pp_schedule;
    facts.pp_virtual = c.pp_virtual;
    facts.micro_batches = int(micro);
    row.problem = parallel::check_run(c.spec(), facts);
    if (!row.problem.empty()) {
      rows.push_back(row);
      continue;
    }
    const bool flat = c.spec().dp_kind() == parallel::DpKind::fsdp && !c.spec().model_parallel();
    const bool split_backward = c.pp > 1 && c.pp_schedule == parallel::PipeSchedule::zb_h1;
    const int64_t probe_seq_len = t.seq_len / c.cp;  // a cp rank's tokens
    const model::ModelConfig rank_model = tp_rank_config(in.model, c.tp);
    const std::vector<int64_t> lengths = probe_lengths(rank_model, probe_seq_len);
    std::ostringstream key_text;
    key_text << in.probe_fingerprint << "|tp " << c.tp << " B " << batch.micro_batch
             << " lengths";
    for (int64_t l : lengths) key_text << " " << l;
    key_text << " flat " << flat << " split " << split_backward;
    const std::string key = key_text.str();
    if (!measured.count(key))
      measured[key] = measure_activations(rank_model, in.lora, batch.micro_batch, lengths,
                                          precision, base, flat, torch::kCPU, probe,
                                          split_backward);
    const ActivationProfile profile = extrapolate_profile(measured.at(key), rank_model,
                                                          probe_seq_len);
    // the worst rank: every stage, the dp ranks whose shards differ (first and last)
    std::optional<parallel::PipeSpec> spec;
    std::optional<parallel::StageSplit> split;
    if (c.pp > 1) {
      spec = parallel::PipeSpec{c.pp_schedule, c.pp, c.pp_virtual, int(micro)};
      split = parallel::split_stages(in.model, in.lora, t.seq_len, c.pp * c.pp_virtual, t.pp_split);
    }
    const int64_t transition_tokens =
        c.cp > 1 && parallel::runs_transition_pass(c.cp_scheme)
            ? model::make_seq_layout(t.seq_len, c.cp, c.cp - 1,
                                     t.cp_layout == parallel::CpLayout::zigzag)
                  .transition_tokens()
            : 0;
    double worst = -1;
    for (int stage = 0; stage < c.pp; ++stage)
      for (int dp_rank : {0, c.dp * c.cp - 1}) {
        const HeldPrediction held = predict_held(c, in.model, in.lora, stored, t.seq_len,
                                                 t.pp_split, stage, dp_rank);
        const RankActivation act = predict_rank_activation(
            profile, in.model, c.tp, spec ? &*spec : nullptr,
            split ? &split->first_block : nullptr, split ? &split->end_block : nullptr, stage,
            batch.micro_batch, transition_tokens, held.working_set);
        const double peak = held.params + held.grads + held.optimizer + act.total();
        if (peak > worst || std::isnan(peak)) {
          worst = peak;
          row.held = held;
          row.activations = act.activations;
          row.comm_buffers = act.comm_buffers;
          row.working_set = act.working_set - act.comm_buffers;
        }
        if (std::isnan(peak)) break;
      }
    row.peak_bytes = worst;
    row.reserve = in.device.reserve_bytes + in.device.rounding * worst;
    row.limit_bytes = in.device.memory_bytes;
    row.fits = std::isfinite(worst) && worst + row.reserve <= row.limit_bytes;

    predict_time(row, in, split ? &*split : nullptr, batch);
    rows.push_back(row);
  }
  return rows;
}

Calibration calibrate(std::vector<CalibrationRun>& runs) {
  Calibration cal;
  // keep: where each run's prediction goes (nullptr: only the error)
  auto error = [&](double efficiency_scale, double link_scale,
                   double CalibrationRun::*keep) {
    double sum = 0;
    for (auto& r : runs) {
      PlanInputs in = r.inputs;
      in.device.efficiency *= efficiency_scale;
      in.device.link_bytes_per_s *= link_scale;
      PlanRow row;
      row.candidate = r.shape.candidate;
      predict_time(row, in, r.shape.stage_split(), r.shape.batch);
      sum += std::abs(std::log(row.step_s / r.measured_step_s));
      if (keep) r.*keep = row.step_s;
    }
    return runs.empty() ? 0.0 : sum / double(runs.size());
  };
  cal.error_before = error(1.0, 1.0, &CalibrationRun::predicted_before_step_s);
  double best = cal.error_before;
  for (double e = 0.05; e <= 4.0; e *= 1.02)
    for (double b = 0.01; b <= 100.0; b *= 1.25) {
      const double err = error(e, b, nullptr);
      if (err < best) {
        best = err;
        cal.efficiency_scale = e;
        cal.link_scale = b;
      }
    }
  cal.error_after = error(cal.efficiency_scale, cal.link_scale, &CalibrationRun::predicted_step_s);
  return cal;
}

std::string format_plan(const std::vector<PlanRow>& rows_in, const PlanInputs& in, bool csv) {
  std::vector<PlanRow> rows = rows_in;
  std::stable_sort(rows.begin(), rows.end(), [](const PlanRow& a, const PlanRow& b) {
    if (a.problem.empty() != b.problem.empty()) return a.problem.empty();
    if (a.fits != b.fits) return a.fits;
    return a.tokens_per_s > b.tokens_per_s;
  });
  std::ostringstream os;
  auto mib = [](double b) { return b / (1024.0 * 1024.0); };
  if (csv) {
    os << "rank,strategy,name,ranks,dp,pp,tp,cp,pp_schedule,pp_virtual,params_bytes,grads_bytes,"
          "optimizer_bytes,working_set_bytes,activation_bytes,comm_buffer_bytes,reserve_bytes,"
          "predicted_peak_bytes,limit_bytes,fits,compute_s,comm_s,bubble_fraction,step_s,"
          "predicted_tokens_per_s,ep,expert_params_bytes,all_to_all_s,cp_scheme,cp_attention,"
          "cp_exchange_s,problem\n";
    int rank = 0;
    for (const auto& r : rows) {
      const auto& c = r.candidate;
      char line[1024];
      std::snprintf(line, sizeof(line),
                    "%d,%s,%s,%d,%d,%d,%d,%d,%s,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%d,"
                    "%.6g,%.6g,%.4f,%.6g,%.6g,%d,%.0f,%.6g,%s,%s,%.6g,%s\n",
                    ++rank, to_string(c.strategy), c.name().c_str(), c.ranks, c.dp, c.pp, c.tp,
                    c.cp, c.pp > 1 ? to_string(c.pp_schedule) : "-", c.pp_virtual, r.held.params,
                    r.held.grads,
                    r.held.optimizer, r.working_set, r.activations, r.comm_buffers, r.reserve,
                    r.peak_bytes, r.limit_bytes, r.fits ? 1 : 0, r.compute_s, r.comm_s, r.bubble,
                    r.step_s, r.tokens_per_s, c.ep, r.held.expert_params, r.all_to_all_s,
                    c.cp > 1 ? to_string(c.cp_scheme) : "-",
                    c.cp > 1 ? to_string(c.cp_attention) : "-", r.cp_exchange_s,
                    r.problem.c_str());
      os << line;
    }
    return os.str();
  }
  char head[512];
  std::snprintf(head, sizeof(head),
                "hlp-plan: model %s, T %d, global batch %d (micro-batch %d), LoRA r %d, %s%s on "
                "%s\n  memory: %.0f MiB a rank (%s); reserve %.0f MiB + %.0f%% of the peak\n"
                "  compute: %.4g GFLOP/s peak (%s) at efficiency %.3g (%s); links: %s\n",
                in.train.model_config.empty() ? in.train.model.c_str() : in.model.name.c_str(),
                in.train.seq_len, in.train.global_batch,
                in.train.micro_batch, in.train.lora_rank, model::to_string(in.train.precision),
                in.train.activation_checkpointing ? ", activation checkpointing" : "",
                in.device.name.c_str(), mib(in.device.memory_bytes), in.device.memory_source.c_str(),
                mib(in.device.reserve_bytes), 100 * in.device.rounding, in.device.peak_flops / 1e9,
                in.device.peak_source.c_str(), in.device.efficiency,
                in.device.efficiency_source.c_str(), in.device.link_source.c_str());
  os << head;
  os << "| # | candidate | params MiB | grads MiB | optim MiB | working set MiB | activations MiB "
        "| comm MiB | reserve MiB | peak + reserve MiB | fits | step s | bubble | tokens/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  int rank = 0;
  for (const auto& r : rows) {
    char line[512];
    if (!r.problem.empty()) {
      std::snprintf(line, sizeof(line), "| - | %s | cannot run: %s ||||||||||||\n",
                    r.candidate.name().c_str(), r.problem.c_str());
    } else {
      std::snprintf(line, sizeof(line),
                    "| %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.3g | %.3f | %.4g |\n",
                    ++rank, r.candidate.name().c_str(), mib(r.held.params), mib(r.held.grads),
                    mib(r.held.optimizer), mib(r.working_set), mib(r.activations),
                    mib(r.comm_buffers), mib(r.reserve), mib(r.peak_bytes + r.reserve), r.fits ? "yes" : "NO",
                    r.step_s, r.bubble, r.tokens_per_s);
    }
    os << line;
  }
  // expert parallelism: what a rank holds of the experts and what the all-to-all costs, beside
  // the experts replicated (ddp) or sharded with everything else (fsdp2) on the whole world
  bool any_ep = false;
  for (const auto& r : rows) any_ep = any_ep || (r.problem.empty() && r.candidate.ep > 1);
  if (any_ep) {
    os << "\n| candidate | routed experts MiB a rank (of params) | all-to-all s a step (of step) |\n"
          "|---|---|---|\n";
    for (const auto& r : rows) {
      const auto& c = r.candidate;
      const bool data_parallel = c.ranks > 1 && c.pp == 1 && c.tp == 1 && c.cp == 1 &&
                                 (c.strategy == parallel::StrategyKind::ddp ||
                                  c.strategy == parallel::StrategyKind::fsdp2);
      if (!r.problem.empty() || !data_parallel) continue;
      char line[256];
      std::snprintf(line, sizeof(line), "| %s | %.1f | %.3g |\n", r.candidate.name().c_str(),
                    mib(r.held.expert_params), r.all_to_all_s);
      os << line;
    }
  }
  // context parallelism: what each exchange scheme's messages cost (cp_exchange_s)
  bool any_cp = false;
  for (const auto& r : rows) any_cp = any_cp || (r.problem.empty() && r.candidate.cp > 1);
  if (any_cp) {
    os << "\n| candidate | cp exchanges s a step (of step) |\n|---|---|\n";
    for (const auto& r : rows) {
      if (!r.problem.empty() || r.candidate.cp <= 1) continue;
      char line[256];
      std::snprintf(line, sizeof(line), "| %s | %.3g |\n", r.candidate.name().c_str(),
                    r.cp_exchange_s);
      os << line;
    }
  }
  return os.str();
}

}  // namespace hlp::train
