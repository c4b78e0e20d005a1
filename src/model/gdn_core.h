#pragma once
// The gated delta rule (docs/model-math.md, "The recurrence" and "The chunked form"), two
// interchangeable cores with the same contract.
//
//   q, k:  [B, T, H, dk]   (already L2-normalised; q already scaled by dk^-1/2)
//   v:     [B, T, H, dv]
//   beta:  [B, T, H]       in (0, 1)
//   g:     [B, T, H]       log decay, <= 0
//   initial_state: [B, H, dk, dv] or undefined (= zeros)
// returns output [B, T, H, dv] and the state after the last token [B, H, dk, dv].
//
// Per head, S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t.
#include <torch/torch.h>

#include <cstdint>

namespace hlp::model {

struct GdnResult {
  torch::Tensor output;       // [B, T, H, dv]
  torch::Tensor final_state;  // [B, H, dk, dv]
};

// Token-by-token reference: T sequential steps of small matmuls. Slow; the ground truth.
GdnResult gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& beta,
                                     const torch::Tensor& g,
                                     const torch::Tensor& initial_state = torch::Tensor());

// Chunked (parallel) form with chunk size C: everything inside a chunk runs for all chunks at
// once as batched matmuls and two unit-lower-triangular solves; only the state hand-over
// between chunks loops (ceil(T / C) steps). T need not be a multiple of C (zero padding).
GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g,
                                   const torch::Tensor& initial_state = torch::Tensor(),
                                   int64_t chunk_size = 64);

}  // namespace hlp::model
