#include "parallel/tensor_parallel.h"

#include <set>

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

const std::set<std::string> kColumnParallel = {"q_proj", "k_proj",   "v_proj", "a_proj",
                                               "b_proj", "g_proj",   "gate_proj",
                                               "up_proj", "w2"};
const std::set<std::string> kRowParallel = {"o_proj", "down_proj"};
const std::set<std::string> kPerChannel = {"q_conv1d", "k_conv1d", "v_conv1d"};

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

}  // namespace

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
    : tp_comm_(std::move(tp_comm)) {
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
  torch::Tensor p = param;  // same TensorImpl: set_data swaps its storage for the slice's
  p.set_data(p.detach().chunk(tp, dim)[size_t(t)].contiguous().clone());
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
  return h + reduce_from_tp_region(block->mlp->forward(mlp_in), c);
}

}  // namespace hlp::parallel
