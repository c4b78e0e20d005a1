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

// Steps 1-4 of the chunked form for all chunks at once (what gated_delta_rule_chunked and the
// lean core share): with N = ceil(T / C) chunks, [B, H, N, C, d] tensors
//   W, U       the solves of (I + A) W = diag(beta Gamma) K and (I + A) U = diag(beta) V
//   q_decayed  Q * Gamma;  qk_decayed (Q K^T) * D [.., C, C];  k_to_end K * exp(gamma_C - gamma)
//   decay      exp(gamma_C) [B, H, N, 1, 1]
// so that chunk n maps its entering state S to V' = U - W S, O = q_decayed S + qk_decayed V',
// S' = decay S + k_to_end^T V'.
struct ChunkTerms {
  torch::Tensor W, U, q_decayed, qk_decayed, k_to_end, decay;
  int64_t T = 0, pad = 0, chunks = 0;
};
ChunkTerms chunk_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& beta, const torch::Tensor& g, int64_t chunk_size);
// [B, T, H, d] -> [B, H, N, C, d] (zero padding) and back
torch::Tensor to_chunks(const torch::Tensor& x, const ChunkTerms& terms);
torch::Tensor from_chunks(const torch::Tensor& x, const ChunkTerms& terms);

}  // namespace hlp::model
