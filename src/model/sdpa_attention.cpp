#include "model/sdpa_attention.h"

#include <torch/version.h>

#include "common/error.h"
#include "model/attention.h"

#if TORCH_VERSION_MAJOR >= 2
#define HLP_HAS_SDPA 1
#else
#define HLP_HAS_SDPA 0
#endif

namespace hlp::model {

namespace {

std::string unavailable_reason(const torch::Device& device) {
  if (!HLP_HAS_SDPA)
    return std::string("this build links LibTorch ") + TORCH_VERSION +
           ", which has no scaled_dot_product_attention (needs >= 2.0)";
  return "the tensors are on " + device.str() + " (sdpa runs on CUDA and the CPU)";
}

}  // namespace

bool sdpa_available(const torch::Device& device) {
  return HLP_HAS_SDPA && (device.is_cuda() || device.is_cpu());
}

AttnImpl resolve_attn_impl(AttnImpl requested, const torch::Device& device) {
  switch (requested) {
    case AttnImpl::automatic:
      // CPU: blocked, also where LibTorch 2.x has a CPU flash kernel: that one computes every
      // tile of a sliding window's band (measured: docs/libtorch2.md, "--attn-impl sdpa on the
      // CPU"; the kernels: src/model/README.md, "Attention kernels"). sdpa stays one flag away.
      return sdpa_available(device) && device.is_cuda() ? AttnImpl::sdpa : AttnImpl::blocked;
    case AttnImpl::sdpa:
      if (!sdpa_available(device))
        throw user_error("--attn-impl sdpa cannot run: ", unavailable_reason(device),
                         "; use --attn-impl auto, blocked or naive");
      return AttnImpl::sdpa;
    default:
      return requested;
  }
}

torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, int64_t window) {
  resolve_attn_impl(AttnImpl::sdpa, q.device());  // throws with the reason
#if HLP_HAS_SDPA
  const int64_t group = q.size(1) / k.size(1), T = q.size(2);
  // GQA: expand K/V heads to H (head h reads KV head h / group, as naive and blocked do).
  // Not enable_gqa (LibTorch >= 2.5): the memory-efficient kernel, the one that takes the
  // sliding-window mask, does not implement it, and SDPA would fall back to the O(T^2) math
  // kernel. The copy is O(B * H * T * hd), small beside the attention it feeds.
  auto k_full = group > 1 ? k.repeat_interleave(group, 1) : k;
  auto v_full = group > 1 ? v.repeat_interleave(group, 1) : v;
  if (window <= 0 || window >= T)  // the band is all of the causal triangle: flash kernel
    return at::scaled_dot_product_attention(q, k_full, v_full, /*attn_mask=*/{},
                                            /*dropout_p=*/0.0, /*is_causal=*/true);
  // Sliding window: the [T, T] boolean band (attention.h's causal_window_mask, so every kernel
  // masks alike), broadcast over batch and heads. Flash takes no mask; the memory-efficient
  // kernel does (SDPA turns it into an additive -inf bias of q's dtype: 2 * T^2 bytes in bf16).
  auto allowed = causal_window_mask(T, window, q.device());
  return at::scaled_dot_product_attention(q, k_full, v_full, allowed, /*dropout_p=*/0.0,
                                          /*is_causal=*/false);
#else
  (void)k;
  (void)v;
  (void)window;
  return {};  // unreachable: resolve_attn_impl threw
#endif
}

}  // namespace hlp::model
