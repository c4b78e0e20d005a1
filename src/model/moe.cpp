#include "model/moe.h"

#include <stdexcept>
#include <string>

namespace hlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = out (a copy); backward: out's gradient as is, and the record's gradient (filled in place
// by load_balancing_loss_into; zeros if no loss took the record) for the router logits
struct InjectRouterGrad : torch::autograd::Function<InjectRouterGrad> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& out,
                               const torch::Tensor& logits, const torch::Tensor& logits_grad) {
    ctx->saved_data["grad"] = logits_grad;
    return out.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {grad[0], ctx->saved_data["grad"].toTensor(), torch::Tensor()};
  }
};

// y = ce + aux (a value); backward: ce gets y's gradient g, and each record's gradient buffer,
// holding d(coef aux)/d logits for a unit loss, is scaled by g in place before the sparse
// layers' backward reads it (this node is the loss's, so it runs before any block's backward)
struct AddLoadBalancing : torch::autograd::Function<AddLoadBalancing> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& ce,
                               const torch::Tensor& aux, c10::List<at::Tensor> grads) {
    ctx->saved_data["grads"] = grads;
    return ce + aux.to(ce.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto g = grad[0];
    for (at::Tensor t : ctx->saved_data["grads"].toTensorList()) t.mul_(g.to(t.scalar_type()));
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor add_load_balancing_loss(const torch::Tensor& ce,
                                      const std::vector<std::shared_ptr<RouterRecord>>& records,
                                      int64_t top_k, double coef) {
  const auto aux = load_balancing_loss_into(records, top_k, coef);
  c10::List<at::Tensor> grads;
  for (const auto& r : records) grads.push_back(r->grad);
  return AddLoadBalancing::apply(ce, coef * aux, grads);
}

namespace {
thread_local ExpertShard* t_expert_shard = nullptr;
thread_local RoutingTally* t_routing_tally = nullptr;
}  // namespace

ExpertShard* current_expert_shard() { return t_expert_shard; }
ExpertShardScope::ExpertShardScope(ExpertShard* shard) : previous_(t_expert_shard) {
  t_expert_shard = shard;
}
ExpertShardScope::~ExpertShardScope() { t_expert_shard = previous_; }

RoutingTally* current_routing_tally() { return t_routing_tally; }
RoutingTallyScope::RoutingTallyScope(RoutingTally* tally) : previous_(t_routing_tally) {
  t_routing_tally = tally;
}
RoutingTallyScope::~RoutingTallyScope() { t_routing_tally = previous_; }

void RoutingTally::add(int64_t layer, const torch::Tensor& expert_counts) {
  auto c = expert_counts.to(torch::kCPU, torch::kLong);
  auto [it, fresh] = counts.emplace(layer, c.clone());
  if (!fresh) it->second.add_(c);
}

bool is_routed_expert_param(const std::string& name) {
  return name.find("mlp.experts.") != std::string::npos;
}

SparseMoeImpl::SparseMoeImpl(const ModelConfig& c, int64_t layer_index)
    : top_k(c.moe_top_k), norm_topk(c.moe_norm_topk), layer_index_(layer_index),
      record_(c.moe_aux_loss) {
  // Registration order = accounting.cpp linear_table order.
  gate = register_module("gate", LoRALinear(c.hidden, c.moe_experts, false));
  num_experts = c.moe_experts;
  first_expert = c.moe_first_local_expert();
  auto holder = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t e = first_expert; e < first_expert + c.moe_local_experts(); ++e)
    experts.push_back(holder->register_module(std::to_string(e), SwiGLU(c.hidden, c.moe_hidden)));
  if (c.moe_shared_hidden > 0) {
    shared_expert = register_module("shared_expert", SwiGLU(c.hidden, c.moe_shared_hidden));
    shared_expert_gate = register_module("shared_expert_gate", LoRALinear(c.hidden, 1, false));
  }
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  const auto rows = x.reshape({B * T, D});
  const auto logits = gate->forward(rows);  // [N, E]
  std::shared_ptr<RouterRecord> record;  // for the load-balancing loss (training)
  if (live_ && is_training()) live_logits_.push_back(logits);
  else if (record_ && is_training() && torch::GradMode::is_enabled())
    record = std::make_shared<RouterRecord>(
        RouterRecord{logits.detach(), torch::zeros_like(logits, logits.options().requires_grad(false))});
  auto probs = torch::softmax(logits, -1, torch::kFloat);  // float32 even in a float64 model
  auto [w, idx] = torch::topk(probs, top_k, -1);          // [N, K], descending
  if (norm_topk) w = w / w.sum(-1, /*keepdim=*/true);
  w = w.to(logits.scalar_type());
  if (RoutingTally* tally = current_routing_tally();
      tally && is_training() && torch::GradMode::is_enabled())
    tally->add(layer_index_, torch::bincount(idx.reshape({-1}), {}, num_experts));
  ExpertShard* shard = current_expert_shard();
  if (int64_t(experts.size()) != num_experts && (!shard || shard->ranks() < 2))
    throw std::logic_error("SparseMoe: a layer holding some of the experts ran without an "
                           "ExpertShard to reach the others");
  auto routed = int64_t(experts.size()) == num_experts ? routed_local(rows, w, idx)
                                                       : routed_sharded(rows, w, idx, *shard);
  auto out = routed.view({B, T, D});
  if (shared_expert) {
    const auto shared = shared_expert->forward(x);
    out = out + torch::sigmoid(shared_expert_gate->forward(x)) * shared;
  }
  if (record) {
    records_.push_back(record);
    out = InjectRouterGrad::apply(out, logits, record->grad);
  }
  return out;
}

torch::Tensor SparseMoeImpl::routed_local(const torch::Tensor& rows, const torch::Tensor& w,
                                          const torch::Tensor& idx) {
  const int64_t N = rows.size(0), D = rows.size(1);
  torch::Tensor routed;  // [N, D], in the experts' output dtype
  // (token, k) slots a expert: only experts with tokens run
  const auto hit = torch::bincount(idx.reshape({-1}), {}, int64_t(experts.size())).cpu();
  const auto counts = hit.accessor<int64_t, 1>();
  for (int64_t e = 0; e < int64_t(experts.size()); ++e) {
    if (counts[e] == 0) continue;
    torch::Tensor token, slot;
    {
      torch::NoGradGuard no_grad;
      const auto pos = (idx == e).nonzero();  // [n, 2]: (token, k), tokens ascending
      token = pos.select(1, 0);
      slot = pos.select(1, 1);
    }
    auto y = experts[size_t(e)]->forward(rows.index_select(0, token).unsqueeze(0)).squeeze(0);
    y = y * w.index({token, slot}).unsqueeze(1).to(y.scalar_type());
    routed = routed.defined() ? routed.index_add(0, token, y.to(routed.scalar_type()))
                              : torch::zeros({N, D}, y.options()).index_add(0, token, y);
  }
  if (!routed.defined()) routed = torch::zeros_like(rows);  // no tokens (N = 0)
  return routed;
}

torch::Tensor SparseMoeImpl::routed_sharded(const torch::Tensor& rows, const torch::Tensor& w,
                                            const torch::Tensor& idx, ExpertShard& shard) {
  const int64_t N = rows.size(0), D = rows.size(1), K = top_k;
  const int P = shard.ranks();
  const int64_t local = int64_t(experts.size());  // E / P
  // The slots sorted by expert, then token (stable): rank p's experts are one run of them.
  torch::Tensor order, token_of, counts;
  {
    torch::NoGradGuard no_grad;
    const auto flat = idx.reshape({-1});  // slot token * K + k
    order = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    token_of = order.div(K, "floor");
    counts = torch::bincount(flat, {}, num_experts).cpu();  // [E]
  }
  const auto recv = shard.exchange_counts(counts);  // [P, local]: what each rank sends me
  const auto c = counts.accessor<int64_t, 1>();
  const auto r = recv.accessor<int64_t, 2>();
  std::vector<int64_t> send_rows(size_t(P), 0), recv_rows(size_t(P), 0);
  for (int p = 0; p < P; ++p)
    for (int64_t e = 0; e < local; ++e) {
      send_rows[size_t(p)] += c[p * local + e];
      recv_rows[size_t(p)] += r[p][e];
    }
  // dispatch: the slots' rows to their experts' ranks
  const auto got = shard.exchange(rows.index_select(0, token_of), send_rows, recv_rows, false);
  // Each local expert runs on its rows from every rank together (in rank order); the outputs
  // go back to where the rows arrived.
  std::vector<torch::Tensor> outputs, places;
  std::vector<int64_t> start(size_t(P), 0);  // where rank p's rows begin in `got`
  for (int p = 1; p < P; ++p) start[size_t(p)] = start[size_t(p) - 1] + recv_rows[size_t(p) - 1];
  for (int64_t e = 0; e < local; ++e) {
    std::vector<torch::Tensor> at;
    for (int p = 0; p < P; ++p) {
      int64_t offset = start[size_t(p)];
      for (int64_t f = 0; f < e; ++f) offset += r[p][f];
      if (r[p][e] > 0) at.push_back(torch::arange(offset, offset + r[p][e], torch::kLong));
    }
    if (at.empty()) continue;
    const auto place = torch::cat(at).to(rows.device());
    outputs.push_back(
        experts[size_t(e)]->forward(got.index_select(0, place).unsqueeze(0)).squeeze(0));
    places.push_back(place);
  }
  torch::Tensor back;  // [rows received, D]: each expert output where its row arrived
  if (outputs.empty()) {
    back = torch::zeros({got.size(0), D}, got.options());
  } else {
    const auto y = torch::cat(outputs);
    back = torch::zeros({got.size(0), D}, y.options()).index_copy(0, torch::cat(places), y);
  }
  // combine: the outputs back to their tokens, in the order they were sent
  const auto ret = shard.exchange(back, recv_rows, send_rows, true);  // [N K, D]
  auto y = ret * w.reshape({-1}).index_select(0, order).unsqueeze(1).to(ret.scalar_type());
  return torch::zeros({N, D}, y.options()).index_add(0, token_of, y);
}

std::vector<std::shared_ptr<RouterRecord>> SparseMoeImpl::take_router_records() {
  std::vector<std::shared_ptr<RouterRecord>> out;
  out.swap(records_);
  return out;
}

std::vector<torch::Tensor> SparseMoeImpl::take_router_logits() {
  std::vector<torch::Tensor> out;
  out.swap(live_logits_);
  return out;
}

namespace {

// [K, E]: the share of the pooled rows whose k-th choice is expert e, in float32 as transformers'
// (no gradient)
torch::Tensor choice_fractions(const torch::Tensor& probs, int64_t top_k) {
  torch::NoGradGuard no_grad;
  const auto chosen = std::get<1>(torch::topk(probs, top_k, -1));  // [R, K]
  return torch::one_hot(chosen, probs.size(1)).to(torch::kFloat).mean(0);
}

}  // namespace

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t top_k) {
  const auto probs = torch::softmax(torch::cat(router_logits, 0), -1);  // [R, E], logits' dtype
  const auto fraction = choice_fractions(probs, top_k);               // [K, E]
  return (fraction * probs.mean(0).unsqueeze(0)).sum() * double(probs.size(1));
}

torch::Tensor load_balancing_loss_into(const std::vector<std::shared_ptr<RouterRecord>>& records,
                                       int64_t top_k, double coef) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> logits;
  for (const auto& r : records) logits.push_back(r->logits);
  const auto aux = load_balancing_loss(logits, top_k);
  // F_e = sum_k f[k, e] = n_e / R; d aux / d logits_r = (E / R) p_r (F - p_r.F). The fractions
  // in float32 as the value's, summed over k in the logits' dtype (as autograd would).
  const auto probs = torch::softmax(torch::cat(logits, 0), -1);
  const int64_t R = probs.size(0), E = probs.size(1);
  const auto F = choice_fractions(probs, top_k).to(probs.scalar_type()).sum(0);  // [E]
  for (const auto& r : records) {
    const auto p = torch::softmax(r->logits, -1);
    r->grad.copy_((coef * double(E) / double(R)) * p * (F - (p * F).sum(-1, /*keepdim=*/true)));
  }
  return aux;
}

}  // namespace hlp::model
