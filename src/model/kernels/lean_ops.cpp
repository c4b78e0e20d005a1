#include "model/kernels/lean_ops.h"

#include <ATen/record_function.h>

#include <array>
#include <cmath>
#include <vector>

#include "model/autocast_state.h"
#include "model/kernels/optional_tensor.h"

namespace hlp::model::lean {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool applicable(Kernels kernels) { return kernels == Kernels::lean; }

namespace {

// On when switched on and not held off by a NoAutocastGuard (excluded dispatch key).
bool autocast_active(c10::DeviceType device) {
  const auto key = device == at::kCPU ? c10::DispatchKey::AutocastCPU : c10::DispatchKey::AutocastCUDA;
  return autocast_enabled(device) && !c10::impl::tls_is_dispatch_key_excluded(key);
}

const char* key_of(c10::DeviceType device) { return device == at::kCPU ? "cpu" : "cuda"; }

}  // namespace

void save_autocast_state(AutogradContext* ctx) {
  for (auto device : {at::kCPU, at::kCUDA}) {
    ctx->saved_data[std::string("autocast_") + key_of(device)] = autocast_active(device);
    ctx->saved_data[std::string("autocast_dtype_") + key_of(device)] =
        static_cast<int64_t>(autocast_dtype(device));
  }
}

AutocastAsInForward::AutocastAsInForward(AutogradContext* ctx) {
  for (auto device : {at::kCPU, at::kCUDA}) {
    const size_t i = device == at::kCPU ? 0 : 1;
    previous_[i] = {autocast_enabled(device), autocast_dtype(device)};
    set_autocast(device, ctx->saved_data[std::string("autocast_") + key_of(device)].toBool(),
                 static_cast<at::ScalarType>(
                     ctx->saved_data[std::string("autocast_dtype_") + key_of(device)].toInt()));
  }
}

AutocastAsInForward::~AutocastAsInForward() {
  // casts of leaves cached while the recomputation ran under autocast are dropped with it
  if (autocast_enabled(at::kCPU) || autocast_enabled(at::kCUDA)) at::autocast::clear_cache();
  set_autocast(at::kCPU, previous_[0].first, previous_[0].second);
  set_autocast(at::kCUDA, previous_[1].first, previous_[1].second);
}

namespace {

using kernels::placeholder_if_undefined;
using kernels::undefined_if_placeholder;

// ---- the reference math of each recomputed operation (the modules' own op sequence) ----

using Inputs = std::array<torch::Tensor, 4>;
using Reference = tensor_list (*)(const Inputs& in, double p, int64_t i);

tensor_list rms_norm_ref(const Inputs& in, double eps, int64_t) {
  auto y = in[0] * torch::rsqrt(in[0].pow(2).mean(-1, /*keepdim=*/true) + eps) * in[1];
  return {in[2].defined() ? y * torch::silu(in[2]) : y};
}

tensor_list swiglu_ref(const Inputs& in, double, int64_t) { return {torch::silu(in[0]) * in[1]}; }

tensor_list dynamic_conv_ref(const Inputs& in, double, int64_t width) {
  const auto& x = in[0];
  auto per_token = in[1].view({x.size(0), x.size(1), -1, width});
  auto padded = torch::constant_pad_nd(x.transpose(1, 2), {width - 1, 0});  // [B, C, T+width-1]
  auto windows = padded.unfold(2, width, 1).permute({0, 2, 1, 3});          // [B, T, C, width]
  return {torch::silu((windows * per_token).sum(-1))};
}

tensor_list causal_conv_ref(const Inputs& in, double, int64_t) {
  const auto& weight = in[1];
  const int64_t width = weight.size(2), channels = weight.size(0);
  auto y = torch::constant_pad_nd(in[0].transpose(1, 2), {width - 1, 0});
  const std::vector<int64_t> one{1}, zero{0};
  y = torch::conv1d(y, weight, torch::Tensor(), at::IntArrayRef(one), at::IntArrayRef(zero),
                    at::IntArrayRef(one), channels);
  return {torch::silu(y.transpose(1, 2))};
}

tensor_list l2_normalize_ref(const Inputs& in, double divisor, int64_t head_dim) {
  auto x = in[1].defined() ? torch::silu(in[0]) : in[0];  // in[1]: a flag tensor for SiLU
  x = x.view({x.size(0), x.size(1), -1, head_dim});
  auto y = x * torch::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + 1e-6);
  return {divisor != 1.0 ? y / divisor : y};
}

tensor_list gates_ref(const Inputs& in, double, int64_t) {
  return {torch::sigmoid(in[1]), -in[2].exp() * torch::softplus(in[0] + in[3])};
}

// Keeps its tensor inputs, nothing else; backward runs F again under autograd (with the
// forward's autocast) and differentiates it.
template <Reference F>
struct RecomputeFn : torch::autograd::Function<RecomputeFn<F>> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                             const torch::Tensor& c, const torch::Tensor& d, double p, int64_t i) {
    RECORD_FUNCTION("hlp::lean::recompute", std::vector<c10::IValue>());
    save_autocast_state(ctx);
    ctx->save_for_backward({a, b, c, d});
    ctx->saved_data["p"] = p;
    ctx->saved_data["i"] = i;
    return F({a, undefined_if_placeholder(b), undefined_if_placeholder(c),
              undefined_if_placeholder(d)},
             p, i);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    AutocastAsInForward autocast(ctx);
    torch::AutoGradMode grad_mode(true);
    Inputs in;
    std::vector<torch::Tensor> wrt;
    std::vector<size_t> wrt_index;
    for (size_t j = 0; j < 4; ++j) {
      in[j] = undefined_if_placeholder(saved[j]);
      if (!in[j].defined()) continue;
      in[j] = in[j].detach();
      if (ctx->needs_input_grad(j) && at::isFloatingType(in[j].scalar_type())) {
        in[j].requires_grad_(true);
        wrt.push_back(in[j]);
        wrt_index.push_back(j);
      }
    }
    const auto out = F(in, ctx->saved_data["p"].toDouble(), ctx->saved_data["i"].toInt());
    std::vector<torch::Tensor> outputs, output_grads;
    for (size_t o = 0; o < out.size(); ++o)
      if (grads[o].defined() && out[o].requires_grad()) {
        outputs.push_back(out[o]);
        output_grads.push_back(grads[o]);
      }
    tensor_list result(6);
    if (wrt.empty() || outputs.empty()) return result;
    const auto d = torch::autograd::grad(outputs, wrt, output_grads, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t w = 0; w < wrt.size(); ++w) result[wrt_index[w]] = d[w];
    return result;
  }
};

template <Reference F>
tensor_list recompute(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c,
                      const torch::Tensor& d, double p = 0.0, int64_t i = 0) {
  return RecomputeFn<F>::apply(a, placeholder_if_undefined(b, a), placeholder_if_undefined(c, a), placeholder_if_undefined(d, a), p, i);
}

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return recompute<rms_norm_ref>(x, weight, {}, {}, eps)[0];
}

torch::Tensor gated_rms_norm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& gate, double eps) {
  return recompute<rms_norm_ref>(x, weight, gate.reshape(x.sizes()), {}, eps)[0];
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  return recompute<swiglu_ref>(gate, up, {}, {})[0];
}

torch::Tensor dynamic_conv_silu(const torch::Tensor& x, const torch::Tensor& conv_kernels,
                                int64_t width) {
  return recompute<dynamic_conv_ref>(x, conv_kernels, {}, {}, 0.0, width)[0];
}

torch::Tensor causal_conv_silu(const torch::Tensor& x, const torch::Tensor& weight) {
  return recompute<causal_conv_ref>(x, weight, {}, {})[0];
}

torch::Tensor l2_normalize(const torch::Tensor& x, int64_t head_dim, double divisor,
                           bool apply_silu) {
  // the SiLU flag travels as a one-element tensor (no gradient is asked of it)
  const auto flag = apply_silu ? torch::ones({1}, x.options()) : torch::Tensor();
  return recompute<l2_normalize_ref>(x, flag, {}, {}, divisor, head_dim)[0];
}

std::pair<torch::Tensor, torch::Tensor> gdn_gates(const torch::Tensor& a, const torch::Tensor& b,
                                                  const torch::Tensor& A_log,
                                                  const torch::Tensor& dt_bias) {
  auto out = recompute<gates_ref>(a, b, A_log, dt_bias);
  return {out[0], out[1]};
}

namespace {

// The state entering every chunk ([B, H, N, dk, dv]) and the final state, without a graph.
std::pair<torch::Tensor, torch::Tensor> entering_states(const ChunkTerms& t, torch::Tensor S) {
  auto W_n = t.W.unbind(2), U_n = t.U.unbind(2), kend_n = t.k_to_end.unbind(2);
  auto decay_n = t.decay.unbind(2);
  std::vector<torch::Tensor> states;
  for (int64_t n = 0; n < t.chunks; ++n) {
    states.push_back(S);
    auto v_new = U_n[n] - torch::matmul(W_n[n], S);
    S = decay_n[n] * S + torch::matmul(kend_n[n].transpose(-1, -2), v_new);
  }
  return {torch::stack(states, 2), S};
}

// Outputs of every chunk from the entering states: [B, H, N, C, dv].
torch::Tensor chunk_outputs(const ChunkTerms& t, const torch::Tensor& states) {
  auto v_new = t.U - torch::matmul(t.W, states);
  return torch::matmul(t.q_decayed, states) + torch::matmul(t.qk_decayed, v_new);
}

struct Grads {
  std::vector<torch::Tensor> dW, dU, dqd, dqk, dkend, ddecay;
  torch::Tensor dS0;
};

// The hand-over between chunks in closed form, last chunk first. Per chunk, with S entering:
// V' = U - W S, O = qd S + qk V', S' = decay S + kend^T V', so given dO and dS':
//   dV' = qk^T dO + kend dS';  dqd = dO S^T;  dqk = dO V'^T;  dkend = V' dS'^T;
//   ddecay = sum(dS' * S);  dU = dV';  dW = -dV' S^T;  dS = qd^T dO + decay dS' - W^T dV'.
Grads hand_over_backward(const ChunkTerms& t, const torch::Tensor& states,
                         const torch::Tensor& dO, torch::Tensor dS) {
  Grads g;
  auto W_n = t.W.unbind(2), U_n = t.U.unbind(2), qd_n = t.q_decayed.unbind(2);
  auto qk_n = t.qk_decayed.unbind(2), kend_n = t.k_to_end.unbind(2), decay_n = t.decay.unbind(2);
  auto S_n = states.unbind(2), dO_n = dO.unbind(2);
  for (auto* v : {&g.dW, &g.dU, &g.dqd, &g.dqk, &g.dkend, &g.ddecay}) v->resize(size_t(t.chunks));
  for (int64_t n = t.chunks - 1; n >= 0; --n) {
    const size_t i = size_t(n);
    const auto& S = S_n[i];
    auto v_new = U_n[i] - torch::matmul(W_n[i], S);
    auto dv_new = torch::matmul(qk_n[i].transpose(-1, -2), dO_n[i]) + torch::matmul(kend_n[i], dS);
    g.dqd[i] = torch::matmul(dO_n[i], S.transpose(-1, -2));
    g.dqk[i] = torch::matmul(dO_n[i], v_new.transpose(-1, -2));
    g.dkend[i] = torch::matmul(v_new, dS.transpose(-1, -2));
    g.ddecay[i] = (dS * S).sum({-2, -1}, /*keepdim=*/true);
    g.dU[i] = dv_new;
    g.dW[i] = -torch::matmul(dv_new, S.transpose(-1, -2));
    dS = torch::matmul(qd_n[i].transpose(-1, -2), dO_n[i]) + decay_n[i] * dS -
         torch::matmul(W_n[i].transpose(-1, -2), dv_new);
  }
  g.dS0 = dS;
  return g;
}

struct GdnLeanFn : torch::autograd::Function<GdnLeanFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& beta,
                             const torch::Tensor& g, const torch::Tensor& s0_or_empty,
                             int64_t chunk_size, bool save_states) {
    RECORD_FUNCTION("hlp::lean::gated_delta_rule_chunked", std::vector<c10::IValue>());
    const auto t = chunk_terms(q, k, v, beta, g, chunk_size);
    const auto s0 = undefined_if_placeholder(s0_or_empty);
    auto S = s0.defined() ? s0 : torch::zeros({k.size(0), k.size(2), k.size(3), v.size(3)}, v.options());
    auto [states, final_state] = entering_states(t, S);
    auto o = from_chunks(chunk_outputs(t, states), t);
    ctx->save_for_backward({q, k, v, beta, g, s0_or_empty,
                            save_states ? states : torch::empty({0}, v.options())});
    ctx->saved_data["chunk"] = chunk_size;
    return {o, final_state};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto s0 = undefined_if_placeholder(saved[5]);
    torch::AutoGradMode grad_mode(true);
    std::vector<torch::Tensor> leaves;
    for (size_t j = 0; j < 5; ++j)
      leaves.push_back(saved[j].detach().requires_grad_(ctx->needs_input_grad(j)));
    const auto t = chunk_terms(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4],
                               ctx->saved_data["chunk"].toInt());
    torch::Tensor states = undefined_if_placeholder(saved[6]);
    auto S0 = s0.defined() ? s0 : torch::zeros({saved[1].size(0), saved[1].size(2), saved[1].size(3),
                                               saved[2].size(3)}, saved[2].options());
    {
      torch::NoGradGuard no_grad;
      const ChunkTerms values{t.W.detach(), t.U.detach(), t.q_decayed.detach(),
                              t.qk_decayed.detach(), t.k_to_end.detach(), t.decay.detach(),
                              t.T, t.pad, t.chunks};
      if (!states.defined()) states = entering_states(values, S0).first;
      auto dO = grads[0].defined() ? to_chunks(grads[0], t) : torch::zeros_like(t.U);
      auto dS = grads[1].defined() ? grads[1] : torch::zeros_like(S0);
      auto g = hand_over_backward(values, states, dO, dS);
      tensor_list result(8);
      result[5] = s0.defined() && ctx->needs_input_grad(5) ? g.dS0 : torch::Tensor();
      std::vector<torch::Tensor> wrt;
      std::vector<size_t> index;
      for (size_t j = 0; j < 5; ++j)
        if (ctx->needs_input_grad(j)) {
          wrt.push_back(leaves[j]);
          index.push_back(j);
        }
      if (wrt.empty()) return result;
      // the terms that depend on an input asking for a gradient (g may be frozen: decay not)
      std::vector<torch::Tensor> terms, term_grads;
      const torch::Tensor all[] = {t.W, t.U, t.q_decayed, t.qk_decayed, t.k_to_end, t.decay};
      const std::vector<torch::Tensor>* parts[] = {&g.dW, &g.dU, &g.dqd, &g.dqk, &g.dkend, &g.ddecay};
      for (size_t j = 0; j < 6; ++j)
        if (all[j].requires_grad()) {
          terms.push_back(all[j]);
          term_grads.push_back(torch::stack(*parts[j], 2));
        }
      if (terms.empty()) return result;
      const auto d = torch::autograd::grad(terms, wrt, term_grads, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t w = 0; w < wrt.size(); ++w) result[index[w]] = d[w];
      return result;
    }
  }
};

}  // namespace

GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g, const torch::Tensor& initial_state,
                                   int64_t chunk_size, GdnStates states) {
  auto out = GdnLeanFn::apply(q, k, v, beta, g, placeholder_if_undefined(initial_state, v), chunk_size,
                              states == GdnStates::save);
  return {out[0], out[1]};
}

}  // namespace hlp::model::lean
