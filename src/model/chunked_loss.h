#pragma once
// Linear + cross entropy over token chunks (`--loss-impl chunked`): the LM head's matmul and the
// mean next-token cross entropy computed chunk by chunk inside one autograd operation, so the
// [N, V] logits and their gradient never exist at once (at the 151,936-id vocabulary and
// T = 4,096 they are 2.3 GiB of fp32 each). Forward keeps only the hidden states, the head
// matrix (a reference) and the targets; backward recomputes each chunk's logits and turns them
// in place into d loss / d logits = (softmax - onehot) / counted, then d hidden = that @ W and
// d W = that^T @ hidden. The matmuls run in the dtype autocast would give them (bf16 / fp16;
// fp16-emulated on the CPU like model::matmul), the softmax in float32 (float64 stays float64),
// so losses and gradients equal the full computation's up to the summation order (float64:
// within 1e-12). One chunk holds about one [rows, V] buffer (two under bf16 / fp16).
#include <torch/torch.h>

#include <cstdint>

namespace hlp::model {

// Rows per chunk for a vocabulary of `vocab` ids: about 16 Mi logits per chunk (64 MiB in
// fp32), at least one row. jet-nemotron-2b's 151,936 ids: 110 rows.
int64_t loss_chunk_rows(int64_t vocab);

// hidden [N, D], weight [V, D] (the head matrix; frozen or trainable, any storage dtype),
// targets [N] int64 (ids < 0 are ignored, as cross_entropy's ignore_index -100) -> the mean
// cross entropy of model::matmul(hidden, weight^T) over the counted targets (0-dim).
// chunk_rows <= 0: loss_chunk_rows(V).
torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, int64_t chunk_rows = 0);

}  // namespace hlp::model
