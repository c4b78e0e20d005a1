#pragma once
// Attention in linear memory: the FlashAttention-2 algorithm (Dao, 2023) in LibTorch ops, as a
// custom autograd function.
//
// Forward: for each query block, visit the key blocks of its band (attention_tiling.h) with an
// online softmax (running row max and row sum), and keep only the output and the per-row
// log-sum-exp. Backward: recompute each tile's probabilities from the log-sum-exp,
// P = exp(q k^T / sqrt(hd) - lse), and accumulate dq, dk, dv tile by tile. Memory is
// O(T * block) per head instead of the naive kernel's O(T^2); full causal attention skips the
// tiles above the diagonal and a sliding window every tile outside its band (O(T * window)).
//
// GQA without repeated K/V: the g = H / KVH query heads that share a KV head are stacked into
// the rows of one tile (row r = position t * g + head j), so one [g * block, hd] x [hd, block]
// product serves the whole group and K/V are read once per KV head.
#include <torch/torch.h>

#include "model/attention_tiling.h"

namespace hlp::model {

// q: [B, H, T, hd]; k, v: [B, KVH, T, hd], H a multiple of KVH (query head h reads KV head
// h / (H / KVH)); any strides. window <= 0: full causal; else query i sees keys
// i - window < j <= i. Returns [B, H, T, hd] in q's dtype. bf16 / fp16 inputs are computed in
// fp32 (scores, running max and sum, accumulators), as FlashAttention does.
torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t window,
                                int64_t block = kAttentionBlock);

}  // namespace hlp::model
