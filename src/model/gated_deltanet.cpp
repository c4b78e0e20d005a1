#include "model/gated_deltanet.h"

#include <cmath>

#include "model/gdn_core.h"
#include "model/kernels/fused_ops.h"
#include "model/kernels/lean_ops.h"
#include "model/autocast_state.h"
#include "model/context_shard.h"

#include <functional>
#include <optional>
#include <tuple>

namespace hlp::model {

ShortConvImpl::ShortConvImpl(int64_t channels, int64_t width) {
  weight = register_parameter("weight", torch::empty({channels, 1, width}));
}

torch::Tensor ShortConvImpl::forward(const torch::Tensor& x) {
  if (lean::applicable(resolve_kernels(kernels, x.is_cuda()))) return lean::causal_conv_silu(x, weight);
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
  return convolve(x, generate(generator_input));
}

torch::Tensor DynamicShortConvImpl::generate(const torch::Tensor& generator_input) {
  // kernels: [B, T, C, width] ('(c w)' layout of the generator output)
  return w2->forward(torch::silu(w1->forward(generator_input)));  // [B, T, C * width]
}

torch::Tensor DynamicShortConvImpl::convolve(const torch::Tensor& x,
                                             const torch::Tensor& generated) {
  const int64_t B = x.size(0), T = x.size(1);
  const Kernels k = resolve_kernels(kernels, x.is_cuda());
  if (fused::applicable(k, {x, generated})) return fused::dynamic_conv_silu(x, generated, width);
  if (lean::applicable(k)) return lean::dynamic_conv_silu(x, generated, width);
  auto per_token = generated.view({B, T, -1, width});
  auto padded = torch::constant_pad_nd(x.transpose(1, 2), {width - 1, 0});  // [B, C, T+width-1]
  auto windows = padded.unfold(2, width, 1).permute({0, 2, 1, 3});          // [B, T, C, width]
  return torch::silu((windows * per_token).sum(-1));                           // [B, T, C]
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const ModelConfig& c)
    : head_dim_k(c.gdn_head_dim_k),
      head_dim_v(c.gdn_head_dim_v),
      chunk_size(c.gdn_chunk),
      key_heads(c.gdn_key_head_count()),
      mode(c.gdn_mode),
      variant(c.gdn_variant) {
  const int64_t key = c.gdn_heads * c.gdn_head_dim_k, value = c.gdn_heads * c.gdn_head_dim_v;
  // Registration order = accounting.cpp parameter_table order (projections, then the rest).
  if (variant == GdnVariant::qwen3_5 || variant == GdnVariant::qwen3_next) {
    const int64_t qk = key_heads * c.gdn_head_dim_k;  // each of q and k
    if (variant == GdnVariant::qwen3_next) {  // fused per key head
      in_proj_qkvz =
          register_module("in_proj_qkvz", LoRALinear(c.hidden, 2 * qk + 2 * value, false));
      in_proj_ba = register_module("in_proj_ba", LoRALinear(c.hidden, 2 * c.gdn_heads, false));
    } else {
      in_proj_qkv = register_module("in_proj_qkv", LoRALinear(c.hidden, 2 * qk + value, false));
      in_proj_z = register_module("in_proj_z", LoRALinear(c.hidden, value, false));
      in_proj_b = register_module("in_proj_b", LoRALinear(c.hidden, c.gdn_heads, false));
      in_proj_a = register_module("in_proj_a", LoRALinear(c.hidden, c.gdn_heads, false));
    }
    // the rest is laid out alike in both
    out_proj = register_module("out_proj", LoRALinear(value, c.hidden, false));
    conv1d = register_module("conv1d", ShortConv(2 * qk + value, c.gdn_conv_width));
    A_log = register_parameter("A_log", torch::zeros({c.gdn_heads}));
    dt_bias = register_parameter("dt_bias", torch::zeros({c.gdn_heads}));
    o_norm = register_module("norm", RMSNorm(c.gdn_head_dim_v, c.gdn_norm_eps));
    return;
  }
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
  for (auto* conv : {&q_conv1d, &k_conv1d, &v_conv1d, &conv1d})
    if (*conv) (*conv)->kernels = k;
}

torch::Tensor GatedDeltaNetImpl::forward(const torch::Tensor& x) {
  const Kernels k = resolve_kernels(kernels, x.is_cuda());
  if (mode == GdnMode::chunked && fused::applicable(k, {x, A_log, dt_bias}))
    return forward_impl(x, Kernels::fused);
  return forward_impl(x, lean::applicable(k) ? Kernels::lean : Kernels::reference);
}

torch::Tensor GatedDeltaNetImpl::forward_fused(const torch::Tensor& x) {
  return forward_impl(x, Kernels::fused);
}

namespace {

// Under a ContextShard: each local piece of `in` [B, T, C] convolved causally with the
// (width - 1) rows before it (from their owners), then the pieces concatenated again.
// conv(joined [B, h + length, C], piece, h) -> [B, h + length, C'] (the first h rows dropped).
torch::Tensor convolve_pieces(
    const torch::Tensor& in, int64_t width, ContextShard& cp,
    const std::function<torch::Tensor(const torch::Tensor&, const SeqPiece&, int64_t)>& conv) {
  const auto pieces = cp.layout().local_pieces();
  const auto halos = cp.halo(in, width - 1);
  std::vector<torch::Tensor> outs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SeqPiece& p = pieces[i];
    const int64_t h = halos[i].size(1);
    auto joined = torch::cat({halos[i], in.narrow(1, p.local_begin, p.length)}, 1);
    outs.push_back(conv(joined, p, h).narrow(1, h, p.length));
  }
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
}

}  // namespace

GatedDeltaNetImpl::Projected GatedDeltaNetImpl::project(const torch::Tensor& x) {
  ContextShard* cp = current_context_shard();
  // the causal convolutions: the whole sequence, or each piece with its halo under cp
  auto short_conv = [&](ShortConv& conv, const torch::Tensor& in) {
    if (!cp) return conv->forward(in);
    return convolve_pieces(in, conv->weight.size(2), *cp,
                           [&](const torch::Tensor& joined, const SeqPiece&, int64_t) {
                             return conv->forward(joined);
                           });
  };
  auto dynamic_conv = [&](const torch::Tensor& in) {
    if (!cp) return dynamic_conv1d->forward(in, x);
    const auto generated = dynamic_conv1d->generate(x);  // this rank's tokens' kernels
    return convolve_pieces(
        in, dynamic_conv1d->width, *cp, [&](const torch::Tensor& joined, const SeqPiece& p, int64_t h) {
          // the halo rows' own outputs are dropped: zero kernels for them
          auto kernels_of_piece = generated.narrow(1, p.local_begin, p.length);
          return dynamic_conv1d->convolve(joined,
                                          torch::constant_pad_nd(kernels_of_piece, {0, 0, h, 0}));
        });
  };

  if (variant == GdnVariant::jetblock) {
    // SiLU of q and k later (fused into the normalisation on the fused path)
    auto q = q_proj->forward(x), k = k_proj->forward(x);
    auto v = dynamic_conv(v_proj->forward(x));
    return {q, k, v, g_proj->forward(x), a_proj->forward(x), b_proj->forward(x)};
  }
  if (variant == GdnVariant::gated_deltanet) {
    auto q = short_conv(q_conv1d, q_proj->forward(x)), k = short_conv(k_conv1d, k_proj->forward(x));
    auto v = short_conv(v_conv1d, v_proj->forward(x));
    return {q, k, v, g_proj->forward(x), a_proj->forward(x), b_proj->forward(x)};
  }
  // qwen3_5 / qwen3_next: one projection and one convolution over q | k | v, then the key heads
  // repeated for their value heads
  const int64_t B = x.size(0), T = x.size(1);
  torch::Tensor mixed, z, a, b;
  if (variant == GdnVariant::qwen3_next) {
    // key head h's rows: [q dk | k dk | v r dv | z r dv] and [b r | a r] (r value heads a key head)
    const int64_t heads = A_log.size(0);                       // value heads held
    const int64_t rows = in_proj_qkvz->weight.size(0);         // Hk (2 dk + 2 r dv)
    const int64_t key_held = (rows - 2 * heads * head_dim_v) / (2 * head_dim_k);
    const int64_t per = heads / key_held;                      // r
    const auto qkvz = in_proj_qkvz->forward(x).view({B, T, key_held, -1});
    auto part = [&](int64_t begin, int64_t width) {
      return qkvz.narrow(3, begin, width).reshape({B, T, -1});
    };
    mixed = torch::cat({part(0, head_dim_k), part(head_dim_k, head_dim_k),
                        part(2 * head_dim_k, per * head_dim_v)},
                       2);
    z = part(2 * head_dim_k + per * head_dim_v, per * head_dim_v);
    const auto ba = in_proj_ba->forward(x).view({B, T, key_held, 2 * per});
    b = ba.narrow(3, 0, per).reshape({B, T, -1});
    a = ba.narrow(3, per, per).reshape({B, T, -1});
  } else {
    mixed = in_proj_qkv->forward(x);
    z = in_proj_z->forward(x);
    b = in_proj_b->forward(x);
    a = in_proj_a->forward(x);
  }
  const auto qkv = short_conv(conv1d, mixed);
  const int64_t value = z.size(2), qk = (qkv.size(2) - value) / 2;
  auto q = qkv.narrow(2, 0, qk).contiguous(), k = qkv.narrow(2, qk, qk).contiguous();
  auto v = qkv.narrow(2, 2 * qk, value).contiguous();
  const int64_t repeat = value / head_dim_v / (qk / head_dim_k);  // value heads a key head serves
  if (repeat > 1) {
    auto per_value_head = [&](const torch::Tensor& t) {
      return t.reshape({B, T, -1, head_dim_k}).repeat_interleave(repeat, 2).reshape({B, T, -1});
    };
    q = per_value_head(q);
    k = per_value_head(k);
  }
  return {q, k, v, z, a, b};
}

torch::Tensor GatedDeltaNetImpl::forward_impl(const torch::Tensor& x, Kernels path) {
  const bool fused_path = path == Kernels::fused, lean_path = path == Kernels::lean;
  const int64_t B = x.size(0), T = x.size(1);
  const bool jet = variant == GdnVariant::jetblock;
  ContextShard* cp = current_context_shard();
  Projected p = project(x);
  torch::Tensor& q = p.q;  // [B, T, H*dk]
  torch::Tensor& k = p.k;  // [B, T, H*dk]
  torch::Tensor& v = p.v;  // [B, T, H*dv]
  const torch::Tensor& z = p.z;  // [B, T, H*dv]
  const torch::Tensor& a_raw = p.a;  // [B, T, H]
  const torch::Tensor& b_raw = p.b;
  LoRALinear& out = out_proj ? out_proj : o_proj;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(head_dim_k));
  torch::Tensor beta, g;  // [B, T, H]
  if (fused_path) {
    q = fused::l2_normalize(q, head_dim_k, q_scale, /*apply_silu=*/jet).view({B, T, -1, head_dim_k});
    k = fused::l2_normalize(k, head_dim_k, 1.0, /*apply_silu=*/jet).view({B, T, -1, head_dim_k});
    std::tie(beta, g) = fused::gdn_gates(a_raw, b_raw, A_log, dt_bias);
  } else if (lean_path) {
    q = lean::l2_normalize(q, head_dim_k, std::sqrt(static_cast<double>(head_dim_k)), jet);
    k = lean::l2_normalize(k, head_dim_k, 1.0, jet);
    std::tie(beta, g) = lean::gdn_gates(a_raw, b_raw, A_log, dt_bias);
  } else {
    if (jet) {
      q = torch::silu(q);
      k = torch::silu(k);
    }
    q = l2_normalize(q.view({B, T, -1, head_dim_k})) / std::sqrt(static_cast<double>(head_dim_k));
    k = l2_normalize(k.view({B, T, -1, head_dim_k}));
    beta = torch::sigmoid(b_raw);
    g = -A_log.exp() * torch::softplus(a_raw + dt_bias);
  }
  v = v.view({B, T, -1, head_dim_v});  // [B, T, H, dv]

  // The delta-rule core. On the reference path it runs in float32 even under bf16 autocast: the
  // decay exponentials and the triangular solve need the range (and CPU has no bf16 `eye`).
  // Inputs are upcast once here; CPU and CUDA autocast are both held off from here on (the
  // output gate and projection included, as they always were on this path).
  std::optional<NoAutocastGuard> no_autocast;
  if (!fused_path) no_autocast.emplace();
  torch::Tensor o;  // [B, T, H, dv]
  {
    auto fp32 = [](const torch::Tensor& t) {
      return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf
                 ? t.to(torch::kFloat)
                 : t;
    };
    auto core = [&](const torch::Tensor& cq, const torch::Tensor& ck, const torch::Tensor& cv,
                    const torch::Tensor& cb, const torch::Tensor& cg, const torch::Tensor& s0) {
      if (fused_path) return fused::gated_delta_rule_chunked(cq, ck, cv, cb, cg, s0, chunk_size);
      if (lean_path && mode == GdnMode::chunked)
        return lean::gated_delta_rule_chunked(fp32(cq), fp32(ck), fp32(cv), fp32(cb), fp32(cg), s0,
                                              chunk_size);
      if (mode == GdnMode::chunked)
        return gated_delta_rule_chunked(fp32(cq), fp32(ck), fp32(cv), fp32(cb), fp32(cg), s0,
                                        chunk_size);
      return gated_delta_rule_recurrent(fp32(cq), fp32(ck), fp32(cv), fp32(cb), fp32(cg), s0);
    };
    if (!cp) {
      o = core(q, k, v, beta, g, {}).output;
    } else if (cp->heads_sharded(ContextShard::HeadLayer::gdn)) {
      o = core_heads(q, k, v, beta, g, *cp, core);
    } else {
      o = core_pieces(q, k, v, beta, g, *cp, core);
    }
  }
  auto gate = z.view({B, T, -1, head_dim_v});  // [B, T, H, dv]
  if (fused_path) o = fused::gated_rms_norm(o, o_norm->weight, gate, o_norm->eps);
  else if (lean_path) o = lean::gated_rms_norm(o, o_norm->weight, gate, o_norm->eps);
  else o = o_norm->forward(o) * torch::silu(gate);
  return out->forward(o.reshape({B, T, -1}));  // [B, T, D]
}

torch::Tensor GatedDeltaNetImpl::core_heads(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, const torch::Tensor& beta,
                                            const torch::Tensor& g, ContextShard& cp,
                                            const CoreFn& core) {
  // Two all-to-alls in: q | k | v per head (one dtype) and beta | g per head (the gates keep
  // theirs), one out: o. Every head's core is independent of the others', so a rank running the
  // whole sequence for its heads computes exactly what the whole model does for them.
  using HL = ContextShard::HeadLayer;
  const int64_t dk = q.size(3), dv = v.size(3);
  auto common = [](std::vector<torch::Tensor> parts) {
    auto type = parts[0].scalar_type();
    for (const auto& t : parts) type = torch::promote_types(type, t.scalar_type());
    for (auto& t : parts) t = t.to(type);
    return parts;
  };
  const auto qkv = cp.to_heads(torch::cat(common({q, k, v}), 3), HL::gdn);  // [B, T, Hp, 2dk+dv]
  const auto gates =
      cp.to_heads(torch::stack(common({beta, g}), 3), HL::gdn);  // [B, T, Hp, 2]
  auto part = [](const torch::Tensor& t, int64_t begin, int64_t width) {
    return t.narrow(3, begin, width).contiguous();
  };
  const auto o = core(part(qkv, 0, dk), part(qkv, dk, dk), part(qkv, 2 * dk, dv),
                      gates.select(3, 0).contiguous(), gates.select(3, 1).contiguous(), {})
                     .output;  // [B, T, Hp, dv]
  return cp.to_sequence(o.contiguous(), HL::gdn);  // [B, L, H, dv]
}

torch::Tensor GatedDeltaNetImpl::core_pieces(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const torch::Tensor& beta,
                                             const torch::Tensor& g, ContextShard& cp,
                                             const CoreFn& core) {
  // Each piece alone from a zero state gives its outputs o0 and the state it leaves, Q. The
  // recurrence S_t = A_t S_{t-1} + beta_t k_t v_t^T with A_t = (I - beta_t k_t k_t^T) exp(g_t) is
  // affine in the entering state S_in: S_t = M_t S_in + S0_t with M_t = A_t ... A_1, so
  // o_t = S_t^T q_t = o0_t + S_in^T (M_t^T q_t). The same core run with v = 0 from S = I (dk x dk)
  // returns exactly R_t = M_t^T q_t as its outputs and M = M_T as its state. The shard passes
  // S_out = M S_in + Q along the pieces; each piece then adds R_t^T S_in.
  const auto pieces = cp.layout().local_pieces();
  const int64_t B = q.size(0), H = q.size(2), dk = q.size(3);
  std::vector<ContextShard::GdnPiece> parts;
  for (const SeqPiece& p : pieces) {
    auto part = [&](const torch::Tensor& t) { return t.narrow(1, p.local_begin, p.length); };
    auto local = core(part(q), part(k), part(v), part(beta), part(g), {});
    ContextShard::GdnPiece piece{local.output, {}, {}, local.final_state};
    if (p.index > 0) {  // the sequence's first piece starts from zero: no transition needed
      auto identity = torch::eye(dk, local.final_state.options())
                          .expand({B, H, dk, dk}).contiguous();
      auto transition = core(part(q), part(k), torch::zeros_like(part(k)), part(beta), part(g),
                             identity);
      piece.R = transition.output;       // [B, L, H, dk]
      piece.M = transition.final_state;  // [B, H, dk, dk]
    }
    parts.push_back(piece);
  }
  const auto outs = cp.state_chain(parts);  // o0 + R^T S_in of every piece
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
}

}  // namespace hlp::model
