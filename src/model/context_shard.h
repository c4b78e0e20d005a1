#pragma once
// Context parallelism as the model sees it (docs/strategies.md, "Context parallelism").
//
// The sequence [0, T) of every row is cut into equal pieces; each rank of the cp group holds
// some of them, in increasing position order, concatenated along T in its local tensors:
//   contiguous: cp pieces, rank r holds piece r;
//   zigzag:     2 cp pieces, rank r holds pieces r and 2 cp - 1 - r, so that every rank has
//               the same share of causal attention's work (the early piece sees few keys, the
//               late one many).
// Per-token layers (projections, norms, MLP, the head and loss) run on the local tokens as is.
// The layers whose output at a position depends on earlier positions ask the ContextShard that
// the strategy made current (ContextShardScope) for what the other pieces hold:
//   G layers:  the (kernel - 1) inputs before each piece for the short / dynamic convolution
//              (halo), and the delta-rule state entering each piece (state_chain);
//   S layers:  the window - 1 keys and values before each piece (halo);
//   A layers:  every earlier piece's keys and values (ring attention).
// Under the all-to-all schemes a layer instead re-shards sequence -> heads before its core and
// back after (to_heads / to_sequence): G layers keep their convolution halo.
// Every exchange is differentiable: its backward sends the gradients back to where the values
// came from. With no current shard (the default) the model runs on the whole sequence.
// The model knows nothing of communicators: the exchanges are implemented in
// parallel/context_parallel.cpp.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/head_sharding.h"

namespace hlp::model {

struct SeqPiece {
  int index = 0;            // global piece number, 0 .. piece_count() - 1 in position order
  int64_t begin = 0;        // first global position
  int64_t length = 0;
  int64_t local_begin = 0;  // where it starts in the rank's local tensors
  int64_t end() const { return begin + length; }
};

struct SeqLayout {
  int64_t seq_len = 0;  // T of the whole sequence
  int ranks = 1, rank = 0;
  bool zigzag = false;

  int piece_count() const { return zigzag ? 2 * ranks : ranks; }
  int64_t piece_len() const { return seq_len / piece_count(); }
  int owner(int piece) const;                      // the rank holding global piece `piece`
  std::vector<SeqPiece> pieces_of(int rank) const;  // in position order, with local offsets
  std::vector<SeqPiece> local_pieces() const { return pieces_of(rank); }
  int64_t local_len() const { return seq_len / ranks; }
  // This rank's tokens outside the sequence's first piece: what the G layers' transition pass
  // reruns (chain and allgather schemes).
  int64_t transition_tokens() const {
    int64_t n = 0;
    for (const auto& piece : local_pieces())
      if (piece.index > 0) n += piece.length;
    return n;
  }
  // The global positions of this rank's local tokens, [local_len()] int64.
  torch::Tensor positions(const torch::Device& device) const;
  // This rank's columns of a [B, T] tensor (the pieces concatenated).
  torch::Tensor slice(const torch::Tensor& full) const;
};

// Pieces a sequence is cut into over `ranks` context-parallel ranks: 2 ranks (zigzag), ranks
// (contiguous); 1 without context parallelism (ranks 1).
inline int seq_piece_count(int ranks, bool zigzag) {
  return ranks > 1 && zigzag ? 2 * ranks : ranks;
}

// Throws hlp::UserError (naming T and what divides it) when the pieces cannot be equal.
SeqLayout make_seq_layout(int64_t seq_len, int ranks, int rank, bool zigzag);

class ContextShard {
 public:
  virtual ~ContextShard() = default;
  virtual const SeqLayout& layout() const = 0;

  // For each local piece, in order: the rows of x [B, local_len, C] at the global positions
  // [max(0, begin - n), begin), i.e. up to n rows before the piece (fewer at the start of the
  // sequence), gathered from their owners: [B, <= n, C] each.
  virtual std::vector<torch::Tensor> halo(const torch::Tensor& x, int64_t n) = 0;

  // The delta-rule outputs of each local piece finished with the state entering it. The state
  // recurrence is affine in the incoming state: a piece maps S_in to S_out = M S_in + Q, where
  // M [B, H, dk, dk] is its transition and Q [B, H, dk, dv] the state it leaves from a zero
  // start, and its outputs are o = o0 + R^T S_in (o0 [B, L, H, dv] from a zero start,
  // R [B, L, H, dk] = M_t^T q_t). Passes the states along the pieces in position order and
  // returns every local piece's o. Piece 0 of the sequence starts from zero: its R and M are
  // undefined (its Q still feeds the next piece).
  struct GdnPiece {
    torch::Tensor o0, R, M, Q;
  };
  virtual std::vector<torch::Tensor> state_chain(const std::vector<GdnPiece>& pieces) = 0;

  // Causal attention (window <= 0) or sliding-window attention of this rank's queries over the
  // whole sequence's keys. q [B, H, local_len, hd]; k, v [B, KVH, local_len, hd] (RoPE applied
  // at the global positions) -> [B, H, local_len, hd].
  virtual torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t window) = 0;

  // The all-to-all schemes (Ulysses): a layer kind whose core runs head-sharded re-shards its
  // inputs with to_heads, runs its own whole-sequence core on its heads (no state or key
  // exchange) and returns the output with to_sequence.
  enum class HeadLayer { gdn, attention };
  virtual bool heads_sharded(HeadLayer) const { return false; }
  // x [B, local_len, H, d]: this rank's tokens, every head -> [B, T, H / ranks, d]: every
  // position in order, rank r's heads [r H / ranks, (r + 1) H / ranks). Differentiable (the
  // backward is to_sequence of the gradient).
  virtual torch::Tensor to_heads(const torch::Tensor& x, HeadLayer layer) = 0;
  // The inverse: [B, T, H / ranks, d] -> [B, local_len, H, d].
  virtual torch::Tensor to_sequence(const torch::Tensor& x, HeadLayer layer) = 0;
};

// The shard the calling thread's forward runs under (nullptr: the whole sequence).
ContextShard* current_context_shard();

// Makes `shard` current on this thread for the scope (nullptr: none); restores the previous one.
class ContextShardScope {
 public:
  explicit ContextShardScope(ContextShard* shard);
  ~ContextShardScope();
  ContextShardScope(const ContextShardScope&) = delete;
  ContextShardScope& operator=(const ContextShardScope&) = delete;

 private:
  ContextShard* previous_;
};

}  // namespace hlp::model
