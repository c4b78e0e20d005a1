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

// The same tiles between query rows and keys at global positions: the pieces ring attention
// (context parallelism, parallel/context_parallel.cpp) is made of. Grouped layout:
// q [N = B * KVH, Lq * g, hd] (row = position * g + head in group, group_queries), k, v
// [N, Lk, hd]; queries at global positions [q_begin, q_begin + Lq), keys at
// [k_begin, k_begin + Lk); float32 or float64, contiguous; no autograd.
struct AttentionRows {  // the query rows' running online-softmax sums over the keys added so far
  torch::Tensor row_max, row_sum, acc;  // [N, R], [N, R], [N, R, hd]
};
AttentionRows attention_rows_start(const torch::Tensor& q);  // max -inf, sums 0
void attention_rows_add(AttentionRows& rows, const torch::Tensor& q, int64_t q_begin,
                        const torch::Tensor& k, const torch::Tensor& v, int64_t k_begin,
                        int64_t group, int64_t window, int64_t block = kAttentionBlock);
// {out [N, R, hd], lse [N, R]}: the attention over every key added, and its log-sum-exp.
std::pair<torch::Tensor, torch::Tensor> attention_rows_finish(const AttentionRows& rows);
// Adds to dq [N, R, hd], dk, dv [N, Lk, hd] the gradients through the keys [k_begin, +Lk), with
// P recomputed from the final lse; delta = rowsum(d_out * out) [N, R].
void attention_rows_backward(const torch::Tensor& q, int64_t q_begin, const torch::Tensor& d_out,
                             const torch::Tensor& lse, const torch::Tensor& delta,
                             const torch::Tensor& k, const torch::Tensor& v, int64_t k_begin,
                             int64_t group, int64_t window, torch::Tensor& dq, torch::Tensor& dk,
                             torch::Tensor& dv, int64_t block = kAttentionBlock);
// [B, H, T, hd] -> grouped rows [B * KVH, T * g, hd] (contiguous), and back.
torch::Tensor group_queries(const torch::Tensor& q, int64_t kv_heads);
torch::Tensor ungroup_queries(const torch::Tensor& rows, int64_t batch, int64_t heads,
                              int64_t kv_heads);

}  // namespace hlp::model
