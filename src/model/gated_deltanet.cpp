#include "model/gated_deltanet.h"

#include <cmath>

#include "model/gdn_core.h"
#include "model/kernels/fused_ops.h"
#include "model/autocast_state.h"

namespace hlp::model {

ShortConvImpl::ShortConvImpl(int64_t channels, int64_t width) {
  weight = register_parameter("weight", torch::empty({channels, 1, width}));
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& x) {
  const int64_t width = weight.size(2), channels = weight.size(0);
  auto y = torch::constant_pad_nd(x.transpose(1, 2), {width - 1, 0});  // [B, C, T + width - 1]
  const std::vector<int64_t> one{1}, zero{0};
  y = torch::conv1d(y, weight, /*bias=*/torch::Tensor(), /*stride=*/at::IntArrayRef(one),
                    /*padding=*/at::IntArrayRef(zero), /*dilation=*/at::IntArrayRef(one),
                    /*groups=*/channels);  // [B, C, T]
  return torch::silu(y.transpose(1, 2));
}

DynamicShortConvImpl::DynamicShortConvImpl(int64_t generator_in, int64_t channels, int64_t width_,
                                           int64_t reduction)
    : width(width_) {
  auto generator = register_module("kernel_generator", std::make_shared<torch::nn::Module>());
  w1 = generator->register_module("w1", LoRALinear(generator_in, channels / reduction, false));
  w2 = generator->register_module("w2", LoRALinear(channels / reduction, channels * width, true));
}

torch::Tensor DynamicShortConvImpl::forward(const torch::Tensor& x,
                                            const torch::Tensor& generator_input) {
  const int64_t B = x.size(0), T = x.size(1);
  // kernels: [B, T, C, width] ('(c w)' layout of the generator output)
  auto generated = w2->forward(torch::silu(w1->forward(generator_input)));  // [B, T, C * width]
  if (fused::applicable(kernels, {x, generated})) return fused::dynamic_conv_silu(x, generated, width);
  auto per_token = generated.view({B, T, -1, width});
  auto padded = torch::constant_pad_nd(x.transpose(1, 2), {width - 1, 0});  // [B, C, T+width-1]
  auto windows = padded.unfold(2, width, 1).permute({0, 2, 1, 3});          // [B, T, C, width]
  return torch::silu((windows * per_token).sum(-1));                           // [B, T, C]
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const ModelConfig& c)
    : head_dim_k(c.gdn_head_dim_k),
      head_dim_v(c.gdn_head_dim_v),
      chunk_size(c.gdn_chunk),
      mode(c.gdn_mode),
      variant(c.gdn_variant) {
  const int64_t key = c.gdn_heads * c.gdn_head_dim_k, value = c.gdn_heads * c.gdn_head_dim_v;
  // Registration order = accounting.cpp parameter_table order (projections, then the rest).
  q_proj = register_module("q_proj", LoRALinear(c.hidden, key, false));
  k_proj = register_module("k_proj", LoRALinear(c.hidden, key, false));
  v_proj = register_module("v_proj", LoRALinear(c.hidden, value, false));
  a_proj = register_module("a_proj", LoRALinear(c.hidden, c.gdn_heads, false));
  b_proj = register_module("b_proj", LoRALinear(c.hidden, c.gdn_heads, false));
  g_proj = register_module("g_proj", LoRALinear(c.hidden, value, false));
  o_proj = register_module("o_proj", LoRALinear(value, c.hidden, false));
  if (variant == GdnVariant::gated_deltanet) {
    q_conv1d = register_module("q_conv1d", ShortConv(key, c.gdn_conv_width));
    k_conv1d = register_module("k_conv1d", ShortConv(key, c.gdn_conv_width));
    v_conv1d = register_module("v_conv1d", ShortConv(value, c.gdn_conv_width));
  } else {
    dynamic_conv1d = register_module(
        "dynamic_conv1d", DynamicShortConv(c.hidden, value, c.gdn_conv_width, c.gdn_dconv_reduction));
  }
  A_log = register_parameter("A_log", torch::zeros({c.gdn_heads}));
  dt_bias = register_parameter("dt_bias", torch::zeros({c.gdn_heads}));
  o_norm = register_module("o_norm", RMSNorm(c.gdn_head_dim_v, c.gdn_norm_eps));
}

namespace {

// x / sqrt(sum x^2 + 1e-6) over the last dimension
torch::Tensor l2_normalize(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + 1e-6);
}

}  // namespace

void GatedDeltaNetImpl::set_kernels(Kernels k) {
  kernels = k;
  o_norm->kernels = k;
  if (dynamic_conv1d) dynamic_conv1d->kernels = k;
}

torch::Tensor GatedDeltaNetImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  if (mode == GdnMode::chunked && fused::applicable(kernels, {x, A_log, dt_bias}))
    return forward_fused(x);
  torch::Tensor q, k, v;  // [B, T, H*dk], [B, T, H*dk], [B, T, H*dv]
  if (variant == GdnVariant::gated_deltanet) {
    q = q_conv1d->forward(q_proj->forward(x));
    k = k_conv1d->forward(k_proj->forward(x));
    v = v_conv1d->forward(v_proj->forward(x));
  } else {
    q = torch::silu(q_proj->forward(x));
    k = torch::silu(k_proj->forward(x));
    v = dynamic_conv1d->forward(v_proj->forward(x), x);
  }
  q = q.view({B, T, -1, head_dim_k});  // [B, T, H, dk]
  k = k.view({B, T, -1, head_dim_k});
  v = v.view({B, T, -1, head_dim_v});  // [B, T, H, dv]
  q = l2_normalize(q) / std::sqrt(static_cast<double>(head_dim_k));
  k = l2_normalize(k);
  auto beta = torch::sigmoid(b_proj->forward(x));                                  // [B,T,H]
  auto g = -A_log.exp() * torch::softplus(a_proj->forward(x) + dt_bias);           // [B,T,H]

  // The delta-rule core runs in float32 even under bf16 autocast: the decay exponentials and the
  // triangular solve need the range (and CPU has no bf16 `eye`). Inputs are upcast once here;
  // CPU and CUDA autocast are both held off inside (NoAutocastGuard).
  NoAutocastGuard no_autocast;
  auto fp32 = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf
               ? t.to(torch::kFloat)
               : t;
  };
  auto core = mode == GdnMode::chunked
                  ? gated_delta_rule_chunked(fp32(q), fp32(k), fp32(v), fp32(beta), fp32(g), {},
                                             chunk_size)
                  : gated_delta_rule_recurrent(fp32(q), fp32(k), fp32(v), fp32(beta), fp32(g));
  auto gate = g_proj->forward(x).view({B, T, -1, head_dim_v});                     // [B,T,H,dv]
  auto o = o_norm->forward(core.output) * torch::silu(gate);                       // [B,T,H,dv]
  return o_proj->forward(o.reshape({B, T, -1}));                                  // [B,T,D]
}

torch::Tensor GatedDeltaNetImpl::forward_fused(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1);
  const bool jet = variant == GdnVariant::jetblock;
  torch::Tensor q, k, v;  // [B, T, H*dk], [B, T, H*dk], [B, T, H*dv]
  if (jet) {
    q = q_proj->forward(x);  // SiLU is fused into the normalisation below
    k = k_proj->forward(x);
    v = dynamic_conv1d->forward(v_proj->forward(x), x);
  } else {
    q = q_conv1d->forward(q_proj->forward(x));
    k = k_conv1d->forward(k_proj->forward(x));
    v = v_conv1d->forward(v_proj->forward(x));
  }
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(head_dim_k));
  q = fused::l2_normalize(q, head_dim_k, q_scale, /*apply_silu=*/jet).view({B, T, -1, head_dim_k});
  k = fused::l2_normalize(k, head_dim_k, 1.0, /*apply_silu=*/jet).view({B, T, -1, head_dim_k});
  v = v.view({B, T, -1, head_dim_v});
  auto [beta, g] = fused::gdn_gates(a_proj->forward(x), b_proj->forward(x), A_log, dt_bias);  // [B,T,H]
  auto core = fused::gated_delta_rule_chunked(q, k, v, beta, g, {}, chunk_size);
  auto gate = g_proj->forward(x).view({B, T, -1, head_dim_v});                        // [B,T,H,dv]
  auto o = fused::gated_rms_norm(core.output, o_norm->weight, gate, o_norm->eps);     // [B,T,H,dv]
  return o_proj->forward(o.reshape({B, T, -1}));                                     // [B,T,D]
}

}  // namespace hlp::model
