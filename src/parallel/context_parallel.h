#pragma once
// Context parallelism (--cp N): the sequence of every row is split along T over the N ranks of a
// cp group (model/context_shard.h for the layout and what each layer kind asks for); this is the
// communicating side. Every exchange is point-to-point on the cp communicator and
// differentiable: its backward returns the gradients to where the values came from.
//
//   halo(x, n)        the n rows before each local piece, from their owners. G layers: the
//                     (kernel - 1) convolution inputs; S layers: window - 1 keys and values.
//   state_chain       the delta-rule state entering each piece, and each piece's outputs
//                     finished as o0 + R^T S_in; backward: dS_in = R dO + M^T dS_out. Two
//                     schemes (--cp-scheme):
//                     chain      the state passed along the pieces in position order as
//                                S_out = M S_in + Q, one [B, H, dk, dv] message a piece boundary
//                                that crosses ranks (the backward the other way): a sequential
//                                hop per boundary;
//                     allgather  one all-gather of every piece's (M, Q) ([B, H, dk, dk] and
//                                [B, H, dk, dv]; piece 0's M is sent as zeros so that every rank
//                                sends alike), each rank merging the prefix up to its pieces;
//                                backward one all-gather of every piece's R dO ([B, H, dk, dv])
//                                and the suffix merged the same way: no chain of waits.
//                     alltoall   no state exchange: to_heads / to_sequence below.
//   to_heads          the all-to-all schemes (--cp-scheme alltoall for G layers, --cp-attention
//   to_sequence       alltoall for A and S layers): one all-to-all moves each rank's tokens of
//                     every other rank's heads there ([B, L, H / p, d] to each of the p - 1
//                     others), the receiver placing them at their global positions; the
//                     inverse sends the outputs back. Backward: the inverse exchange of the
//                     gradients. G layers send q | k | v and beta | g before the core and o
//                     after; A / S layers q | k | v (KV heads repeated to divide, see
//                     model::attention_kv_repeat) and the output.
//   attention         A layers: ring attention. The KV blocks travel around the cp ring (p - 1
//                     shifts, each overlapped with the step's tiles); every rank merges the
//                     partial softmax sums of the blocks it sees with the log-sum-exp rule of the
//                     blocked kernel. Backward sends the blocks around again with their dK, dV
//                     accumulators (p shifts: they end at their owner). Under the zigzag layout
//                     every rank does the same number of tiles.
//                     S layers (window > 0): the halo of window - 1 keys and values, nothing else.
//
// ContextParallel counts the bytes it sends per kind and direction, and the attention tiles and
// seconds of each rank (its balance), for the result file (/context_parallel).
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "model/context_shard.h"
#include "parallel/registry.h"

namespace hlp::parallel {

// gdn_heads / attn_heads: the all-to-all schemes' re-sharding of G / attention layers
enum class CpExchange { conv_halo, gdn_state, window_halo, ring_kv, gdn_heads, attn_heads, count };
const char* cp_exchange_name(CpExchange kind);  // "conv_halo", "gdn_state", ...

struct CpStats {
  // bytes this rank sent, [kind][0 forward, 1 backward]
  std::array<std::array<int64_t, 2>, size_t(CpExchange::count)> bytes_sent{};
  int64_t attention_score_entries = 0;  // query x key pairs of the A-layer tiles this rank visited
  double attention_s = 0;               // seconds in ring attention's tiles (forward + backward)
  // seconds in the delta-rule state chain (forward + backward), its waits for the neighbours
  // included: what the sequential scan over the ranks costs
  double state_chain_s = 0;
};

class ContextParallel : public model::ContextShard {
 public:
  // cp_comm: the cp group (rank = position of this rank's pieces); the layout's seq_len = T.
  ContextParallel(std::shared_ptr<comm::Communicator> cp_comm, int64_t seq_len, bool zigzag,
                  CpScheme scheme = CpScheme::chain, CpAttention attention = CpAttention::ring);

  const model::SeqLayout& layout() const override { return layout_; }
  std::vector<torch::Tensor> halo(const torch::Tensor& x, int64_t n) override;
  std::vector<torch::Tensor> state_chain(const std::vector<GdnPiece>& pieces) override;
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          int64_t window) override;
  bool heads_sharded(HeadLayer layer) const override;
  torch::Tensor to_heads(const torch::Tensor& x, HeadLayer layer) override;
  torch::Tensor to_sequence(const torch::Tensor& x, HeadLayer layer) override;

  comm::Communicator& comm() const { return *comm_; }
  CpScheme scheme() const { return scheme_; }
  CpAttention attention_scheme() const { return attention_; }
  const CpStats& stats() const { return stats_; }
  CpStats& mutable_stats() { return stats_; }
  // The kind halo() counts its bytes as: conv_halo (G layers), window_halo while attention()
  // takes an S layer's keys and values.
  CpExchange halo_kind() const { return halo_kind_; }

 private:
  std::shared_ptr<comm::Communicator> comm_;
  model::SeqLayout layout_;
  CpScheme scheme_ = CpScheme::chain;
  CpAttention attention_ = CpAttention::ring;
  CpStats stats_;
  CpExchange halo_kind_ = CpExchange::conv_halo;
};

}  // namespace hlp::parallel
