#include "model/sdpa_attention.h"

#include <torch/version.h>

#include "common/error.h"

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
  return "the tensors are on " + device.str() + " (sdpa is used on CUDA only)";
}

}  // namespace

bool sdpa_available(const torch::Device& device) { return HLP_HAS_SDPA && device.is_cuda(); }

AttnImpl resolve_attn_impl(AttnImpl requested, const torch::Device& device) {
  switch (requested) {
    case AttnImpl::automatic:
      return sdpa_available(device) ? AttnImpl::sdpa : AttnImpl::blocked;
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
  const int64_t group = q.size(1) / k.size(1);
  // GQA: SDPA of LibTorch < 2.5 wants equal head counts (repeat is O(T), not O(T^2)).
  auto k_full = group > 1 ? k.repeat_interleave(group, 1) : k;
  auto v_full = group > 1 ? v.repeat_interleave(group, 1) : v;
  if (window <= 0)
    return at::scaled_dot_product_attention(q, k_full, v_full, /*attn_mask=*/{},
                                            /*dropout_p=*/0.0, /*is_causal=*/true);
  // Sliding window: a [T, T] boolean band mask (1 byte an entry, shared by every head).
  const int64_t T = q.size(2);
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
  auto distance = pos.unsqueeze(1) - pos.unsqueeze(0);
  auto allowed = (distance >= 0) & (distance < window);
  return at::scaled_dot_product_attention(q, k_full, v_full, allowed, 0.0, false);
#else
  (void)k;
  (void)v;
  (void)window;
  return {};  // unreachable: resolve_attn_impl threw
#endif
}

}  // namespace hlp::model
