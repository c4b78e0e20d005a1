#include "model/kernels/fused_ops.h"

#include "model/autocast_state.h"
#include <ATen/record_function.h>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/optional_tensor.h"

namespace hlp::model::fused {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool applicable(Kernels kernels, std::initializer_list<torch::Tensor> tensors) {
  if (kernels != Kernels::fused || autocast_enabled(at::kCPU)) return false;
  c10::optional<torch::ScalarType> dtype;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!t.device().is_cpu()) return false;
    const auto s = t.scalar_type();
    if (s != torch::kFloat && s != torch::kDouble) return false;
    if (dtype && *dtype != s) return false;
    dtype = s;
  }
  return true;
}

namespace {

using kernels::placeholder_if_undefined;
using kernels::undefined_if_placeholder;

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  // gate: empty placeholder for a plain RMSNorm
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& gate_or_empty,
                               double eps) {
    RECORD_FUNCTION("hlp::fused::rms_norm", std::vector<c10::IValue>());  // named in profiles
    const auto gate = undefined_if_placeholder(gate_or_empty);
    auto [y, inv_rms] = kernels::rms_norm_forward(x, weight, gate, eps);
    ctx->save_for_backward({x, weight, gate_or_empty, inv_rms});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto gate = undefined_if_placeholder(saved[2]);
    auto [dx, dw, dgate] = kernels::rms_norm_backward(grads[0], saved[0], saved[1], gate,
                                                      saved[3], ctx->needs_input_grad(1));
    return {dx, dw, dgate, torch::Tensor()};
  }
};

struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    RECORD_FUNCTION("hlp::fused::swiglu", std::vector<c10::IValue>());  // named in profiles
    ctx->save_for_backward({gate, up});
    return kernels::swiglu_forward(gate, up);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dgate, dup] = kernels::swiglu_backward(grads[0], saved[0], saved[1]);
    return {dgate, dup};
  }
};

struct DynamicConvFn : torch::autograd::Function<DynamicConvFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& conv_kernels, int64_t width) {
    RECORD_FUNCTION("hlp::fused::dynamic_conv", std::vector<c10::IValue>());  // named in profiles
    ctx->save_for_backward({x, conv_kernels});
    ctx->saved_data["width"] = width;
    return kernels::dynamic_conv_forward(x, conv_kernels, width);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dk] = kernels::dynamic_conv_backward(grads[0], saved[0], saved[1],
                                                   ctx->saved_data["width"].toInt());
    return {dx, dk.view(saved[1].sizes()), torch::Tensor()};
  }
};

struct L2NormalizeFn : torch::autograd::Function<L2NormalizeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t head_dim,
                               double scale, bool apply_silu) {
    RECORD_FUNCTION("hlp::fused::l2_normalize", std::vector<c10::IValue>());  // named in profiles
    auto [y, inv_norm] = kernels::l2_normalize_forward(x, head_dim, scale, apply_silu);
    ctx->save_for_backward({x, inv_norm});
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["apply_silu"] = apply_silu;
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto dx = kernels::l2_normalize_backward(
        grads[0], saved[0], saved[1], ctx->saved_data["head_dim"].toInt(),
        ctx->saved_data["scale"].toDouble(), ctx->saved_data["apply_silu"].toBool());
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct GdnGatesFn : torch::autograd::Function<GdnGatesFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                             const torch::Tensor& A_log, const torch::Tensor& dt_bias) {
    RECORD_FUNCTION("hlp::fused::gdn_gates", std::vector<c10::IValue>());  // named in profiles
    ctx->save_for_backward({a, b, A_log, dt_bias});
    auto [beta, g] = kernels::gdn_gates_forward(a, b, A_log, dt_bias);
    return {beta, g};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [da, db, dA_log, ddt_bias] = kernels::gdn_gates_backward(grads[0], grads[1], s[0], s[1],
                                                                  s[2], s[3]);
    return {da, db, dA_log, ddt_bias};
  }
};

struct GdnChunkedFn : torch::autograd::Function<GdnChunkedFn> {
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const torch::Tensor& beta,
                             const torch::Tensor& g, const torch::Tensor& initial_state_or_empty,
                             int64_t chunk, bool save_states) {
    RECORD_FUNCTION("hlp::fused::gated_delta_rule", std::vector<c10::IValue>());  // named in profiles
    const auto initial_state = undefined_if_placeholder(initial_state_or_empty);
    auto [out, final_state, states] =
        kernels::gdn_chunked_forward(q, k, v, beta, g, initial_state, chunk, save_states);
    ctx->save_for_backward({q, k, v, beta, g, initial_state_or_empty,
                            placeholder_if_undefined(states, v)});
    ctx->saved_data["chunk"] = chunk;
    return {out, final_state};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    auto d = kernels::gdn_chunked_backward(grads[0], grads[1], s[0], s[1], s[2], s[3], s[4],
                                           undefined_if_placeholder(s[5]),
                                           undefined_if_placeholder(s[6]),
                                           ctx->saved_data["chunk"].toInt());
    return {d.q, d.k, d.v, d.beta, d.g, d.initial_state, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFn::apply(x, weight, placeholder_if_undefined({}, x), eps);
}

torch::Tensor gated_rms_norm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& gate, double eps) {
  return RmsNormFn::apply(x, weight, gate.reshape(x.sizes()), eps);
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  return SwiGluFn::apply(gate, up);
}

torch::Tensor dynamic_conv_silu(const torch::Tensor& x, const torch::Tensor& conv_kernels,
                                int64_t width) {
  return DynamicConvFn::apply(x, conv_kernels, width);
}

torch::Tensor l2_normalize(const torch::Tensor& x, int64_t head_dim, double scale,
                           bool apply_silu) {
  return L2NormalizeFn::apply(x, head_dim, scale, apply_silu);
}

std::pair<torch::Tensor, torch::Tensor> gdn_gates(const torch::Tensor& a, const torch::Tensor& b,
                                                  const torch::Tensor& A_log,
                                                  const torch::Tensor& dt_bias) {
  auto out = GdnGatesFn::apply(a, b, A_log, dt_bias);
  return {out[0], out[1]};
}

GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g, const torch::Tensor& initial_state,
                                   int64_t chunk_size, GdnStates states) {
  auto out = GdnChunkedFn::apply(q, k, v, beta, g, placeholder_if_undefined(initial_state, v), chunk_size,
                                 states == GdnStates::save);
  return {out[0], out[1]};
}

}  // namespace hlp::model::fused
