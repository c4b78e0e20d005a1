#include "parallel/tensor_parallel.h"

#include <set>
#include <stdexcept>

#include "common/error.h"
#include "parallel/registry.h"

namespace hlp::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

comm::Communicator* saved_comm(AutogradContext* ctx) {
  return reinterpret_cast<comm::Communicator*>(ctx->saved_data["comm"].toInt());
}

// f: identity forward, all-reduce of the input gradient backward.
struct CopyToTpRegion : torch::autograd::Function<CopyToTpRegion> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, comm::Communicator* c) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(c);
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    at::Tensor g = grad[0].contiguous().clone();
    saved_comm(ctx)->all_reduce(g, comm::ReduceOp::Sum);
    return {g, torch::Tensor()};
  }
};

// g: all-reduce of the partial outputs forward, identity backward.
struct ReduceFromTpRegion : torch::autograd::Function<ReduceFromTpRegion> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, comm::Communicator* c) {
    at::Tensor y = x.contiguous().clone();
    c->all_reduce(y, comm::ReduceOp::Sum);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {grad[0], torch::Tensor()};
  }
};

std::string last_component(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// Qwen3.5 / Qwen3-Next names beside the others: in_proj_qkv's rows and conv1d's channels are
// q | k | v blocks (sliced block by block, tp_segments); in_proj_qkvz / in_proj_ba are laid out
// per key head, so their t-th contiguous piece is key heads t's rows whole.
const std::set<std::string> kColumnParallel = {
    "q_proj",     "k_proj",       "v_proj",     "a_proj",    "b_proj",       "g_proj",
    "gate_proj",  "up_proj",      "w2",         "in_proj_qkv", "in_proj_z", "in_proj_b",
    "in_proj_a",  "in_proj_qkvz", "in_proj_ba"};
const std::set<std::string> kRowParallel = {"o_proj", "down_proj", "out_proj"};
const std::set<std::string> kPerChannel = {"q_conv1d", "k_conv1d", "v_conv1d", "conv1d"};

bool inside_block_half(const std::string& name) {
  return name.find(".mixer.") != std::string::npos || name.find(".mlp.") != std::string::npos;
}

// Dimension along which a parameter is split (-1: not split).
int64_t split_dim(const std::string& name) {
  if (!inside_block_half(name)) return -1;
  const size_t dot = name.rfind('.');
  const std::string leaf = name.substr(dot + 1), module = last_component(name.substr(0, dot));
  if (leaf == "A_log" || leaf == "dt_bias") return 0;  // [H], directly on the mixer
  if (kPerChannel.count(module)) return 0;              // conv weight [C, 1, width]
  if (kColumnParallel.count(module)) {
    if (leaf == "weight" || leaf == "bias" || leaf == "lora_B") return 0;
    return -1;  // lora_A
  }
  if (kRowParallel.count(module)) {
    if (leaf == "bias")
      throw user_error("tensor parallel: row-parallel projection ", name,
                       " has a bias, which is not supported");
    if (leaf == "weight" || leaf == "lora_A") return 1;
    return -1;  // lora_B
  }
  return -1;
}

void require_divisible(int64_t n, int tp, const char* what) {
  if (n % tp != 0)
    throw user_error("--tp ", tp, " does not divide the model's ", what, " (", n,
                     "); choose a --tp that divides it");
}

// The blocks (lengths along the split dimension, whole tensor) that are sliced alike: {q, k, v}
// for a Qwen3.5 / Qwen3-Next Gated DeltaNet's in_proj_qkv rows and conv1d channels, {} otherwise.
std::vector<int64_t> tp_blocks(const std::string& name, const model::ModelConfig& c) {
  if (c.gdn_variant != model::GdnVariant::qwen3_5 && c.gdn_variant != model::GdnVariant::qwen3_next)
    return {};
  if (!inside_block_half(name)) return {};
  const size_t dot = name.rfind('.');
  const std::string leaf = name.substr(dot + 1), module = last_component(name.substr(0, dot));
  const bool qkv_rows = module == "in_proj_qkv" && (leaf == "weight" || leaf == "lora_B");
  if (!qkv_rows && !(module == "conv1d" && leaf == "weight")) return {};
  const int64_t qk = c.gdn_key_head_count() * c.gdn_head_dim_k, value = c.gdn_heads * c.gdn_head_dim_v;
  return {qk, qk, value};
}

}  // namespace

std::vector<TpSegment> tp_segments(const std::string& name, const model::ModelConfig& c,
                                   int64_t whole, int tp, int t) {
  const std::vector<int64_t> found = tp_blocks(name, c);
  const std::vector<int64_t> blocks = found.empty() ? std::vector<int64_t>(1, whole) : found;
  std::vector<TpSegment> out;
  int64_t local = 0, begin = 0;
  for (int64_t length : blocks) {
    if (length % tp != 0)
      throw user_error("--tp ", tp, " does not divide a block of ", name, " (", length,
                       " of its ", whole, "); choose a --tp that divides it");
    const int64_t piece = length / tp;
    out.push_back({local, begin + t * piece, piece});
    local += piece;
    begin += length;
  }
  if (begin != whole)
    throw std::logic_error("tensor parallel: the blocks of " + name + " add up to " +
                           std::to_string(begin) + ", not its " + std::to_string(whole));
  return out;
}

torch::Tensor copy_to_tp_region(const torch::Tensor& x, comm::Communicator* tp_comm) {
  return CopyToTpRegion::apply(x, tp_comm);
}

torch::Tensor reduce_from_tp_region(const torch::Tensor& x, comm::Communicator* tp_comm) {
  return ReduceFromTpRegion::apply(x, tp_comm);
}

int64_t tp_split_dim(const std::string& name) { return split_dim(name); }

TpPlacement tp_placement(const std::string& name) {
  if (!inside_block_half(name)) return TpPlacement::Replicated;
  return split_dim(name) >= 0 ? TpPlacement::Sharded : TpPlacement::Partial;
}

TensorParallel::TensorParallel(const model::ModelConfig& c,
                               std::shared_ptr<comm::Communicator> tp_comm, double lora_dropout)
    : config_(c), tp_comm_(std::move(tp_comm)) {
  RunFacts facts;  // the registry's tensor-parallel rules (heads, MLP width, dropout ...)
  facts.model = &c;
  facts.lora_dropout = lora_dropout;
  const std::string why = check_axis(MeshAxis::TP, tp_comm_->size(), facts);
  if (!why.empty()) throw UserError(why);
}

void TensorParallel::slice(const std::string& name, const torch::Tensor& param) const {
  const int tp = tp_comm_->size(), t = tp_comm_->rank();
  if (tp == 1) return;
  const int64_t dim = split_dim(name);
  if (dim < 0) return;
  require_divisible(param.size(dim), tp, name.c_str());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces;
  for (const TpSegment& s : tp_segments(name, config_, param.size(dim), tp, t))
    pieces.push_back(param.detach().narrow(dim, s.whole_begin, s.length));
  torch::Tensor p = param;  // same TensorImpl: set_data swaps its storage for the slice's
  p.set_data(pieces.size() == 1 ? pieces[0].contiguous().clone() : torch::cat(pieces, dim));
}

torch::Tensor TensorParallel::block_forward(model::Block block,
                                            const torch::Tensor& x) const {
  if (tp_comm_->size() == 1) return block->forward(x);
  comm::Communicator* c = tp_comm_.get();
  // x: [B, T, D] replicated on every tp rank; each half's output is a partial sum until g.
  auto normed = copy_to_tp_region(block->mixer_norm->forward(x), c);
  auto mixed = block->gdn ? block->gdn->forward(normed) : block->attention->forward(normed);
  auto h = x + reduce_from_tp_region(mixed, c);
  auto mlp_in = copy_to_tp_region(block->mlp_norm->forward(h), c);
  return h + reduce_from_tp_region(block->mlp_forward(mlp_in), c);
}

}  // namespace hlp::parallel
