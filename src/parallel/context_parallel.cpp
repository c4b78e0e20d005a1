#include "parallel/context_parallel.h"

#include <algorithm>

#include "common/clock.h"
#include "model/autocast_state.h"
#include "model/blocked_attention.h"

namespace hlp::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using model::SeqLayout;
using model::SeqPiece;

// Tag ranges on the cp communicator, one per exchange (messages of one kind between two ranks
// are matched in issue order; every call waits for all of its messages before it returns).
constexpr int kHaloTag = 0;          // + target piece * pieces + source piece
constexpr int kStateTag = 20000;     // + receiving piece
constexpr int kRingTag = 30000;      // + step

ContextParallel* shard_of(AutogradContext* ctx) {
  return reinterpret_cast<ContextParallel*>(ctx->saved_data["shard"].toInt());
}

// Zero-element stand-in for "no tensor" in an autograd Function's arguments.
torch::Tensor placeholder(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}

struct Overlap {
  int target, source;     // global pieces: the halo of `target` takes rows of `source`
  int64_t begin, end;     // global positions
};

// Every (target piece, source piece) pair whose rows the halo of n rows moves, in a fixed order
// every rank computes alike.
std::vector<Overlap> halo_overlaps(const SeqLayout& l, int64_t n) {
  std::vector<Overlap> out;
  const int pieces = l.piece_count();
  const int64_t len = l.piece_len();
  for (int i = 0; i < pieces; ++i) {
    const int64_t lo = std::max<int64_t>(0, i * len - n), hi = i * len;
    for (int j = 0; j < i; ++j) {
      const int64_t b = std::max(lo, j * len), e = std::min(hi, (j + 1) * len);
      if (b < e) out.push_back({i, j, b, e});
    }
  }
  return out;
}

// Local offset of global position `pos` of piece `piece` on its owner.
int64_t local_offset(const SeqLayout& l, int piece, int64_t pos) {
  for (const SeqPiece& p : l.pieces_of(l.owner(piece)))
    if (p.index == piece) return p.local_begin + (pos - p.begin);
  throw std::logic_error("local_offset: piece not on its owner");
}

// The first global position of piece p's halo of n rows (fewer at the sequence's start).
int64_t halo_begin(const SeqPiece& p, int64_t n) { return std::max<int64_t>(0, p.begin - n); }

int local_slot(const std::vector<SeqPiece>& pieces, int index) {
  for (size_t s = 0; s < pieces.size(); ++s)
    if (pieces[s].index == index) return int(s);
  return -1;
}

// ---- halo ----

struct HaloFn : torch::autograd::Function<HaloFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, int64_t n,
                               int64_t shard) {
    auto* cp = reinterpret_cast<ContextParallel*>(shard);
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, pieces = l.piece_count();
    auto& comm = cp->comm();
    const int64_t B = x.size(0), C = x.size(2);
    std::vector<torch::Tensor> halos;
    for (const SeqPiece& p : mine) {
      const int64_t rows = p.begin - halo_begin(p, n);
      halos.push_back(torch::empty({B, rows, C}, x.options()));
    }
    std::vector<comm::WorkPtr> work;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> landing;  // (buffer, halo rows)
    int64_t sent = 0;
    for (const Overlap& o : halo_overlaps(l, n)) {
      const int to = l.owner(o.target), from = l.owner(o.source);
      if (to != me && from != me) continue;
      const int tag = kHaloTag + o.target * pieces + o.source;
      if (from == me) {
        auto rows = x.narrow(1, local_offset(l, o.source, o.begin), o.end - o.begin);
        if (to == me) {
          const SeqPiece& t = mine[size_t(local_slot(mine, o.target))];
          halos[size_t(local_slot(mine, o.target))]
              .narrow(1, o.begin - halo_begin(t, n), o.end - o.begin)
              .copy_(rows);
          continue;
        }
        auto buf = rows.contiguous();
        sent += comm::tensor_bytes(buf);
        work.push_back(comm.send_async(buf, to, tag));
        landing.emplace_back(buf, torch::Tensor());  // keeps the send buffer alive
      } else {
        const int slot = local_slot(mine, o.target);
        const SeqPiece& t = mine[size_t(slot)];
        auto dest = halos[size_t(slot)].narrow(1, o.begin - halo_begin(t, n), o.end - o.begin);
        auto buf = torch::empty(dest.sizes(), x.options());
        work.push_back(comm.recv_async(buf, from, tag));
        landing.emplace_back(buf, dest);
      }
    }
    for (auto& w : work) w->wait();
    for (auto& [buf, dest] : landing)
      if (dest.defined()) dest.copy_(buf);
    cp->mutable_stats().bytes_sent[size_t(cp->halo_kind())][0] += sent;
    ctx->saved_data["shard"] = shard;
    ctx->saved_data["n"] = n;
    ctx->saved_data["kind"] = int64_t(cp->halo_kind());
    ctx->saved_data["shape"] = x.sizes().vec();
    return halos;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* cp = shard_of(ctx);
    const int64_t n = ctx->saved_data["n"].toInt();
    const auto kind = size_t(ctx->saved_data["kind"].toInt());
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, pieces = l.piece_count();
    auto& comm = cp->comm();
    torch::Tensor like;
    for (auto& g : grads)
      if (g.defined()) like = g;
    auto dx = torch::zeros(shape, like.defined() ? like.options() : torch::TensorOptions());
    auto grad_rows = [&](const Overlap& o) {  // the halo gradient rows of this overlap
      const int slot = local_slot(mine, o.target);
      const SeqPiece& t = mine[size_t(slot)];
      const auto& g = grads[size_t(slot)];
      const int64_t first = o.begin - halo_begin(t, n);
      return g.defined() ? g.narrow(1, first, o.end - o.begin)
                         : torch::zeros({shape[0], o.end - o.begin, shape[2]}, dx.options());
    };
    std::vector<comm::WorkPtr> work;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> landing;  // (buffer, dx rows)
    int64_t sent = 0;
    for (const Overlap& o : halo_overlaps(l, n)) {
      const int to = l.owner(o.target), from = l.owner(o.source);
      if (to != me && from != me) continue;
      const int tag = kHaloTag + o.target * pieces + o.source;
      auto rows = dx.narrow(1, from == me ? local_offset(l, o.source, o.begin) : 0,
                            o.end - o.begin);
      if (to == me && from == me) {
        rows.add_(grad_rows(o));
      } else if (to == me) {  // send the gradient of rows we received back to their owner
        auto buf = grad_rows(o).contiguous();
        sent += comm::tensor_bytes(buf);
        work.push_back(comm.send_async(buf, from, tag));
        landing.emplace_back(buf, torch::Tensor());
      } else {
        auto buf = torch::empty(rows.sizes(), dx.options());
        work.push_back(comm.recv_async(buf, to, tag));
        landing.emplace_back(buf, rows);
      }
    }
    for (auto& w : work) w->wait();
    for (auto& [buf, dest] : landing)
      if (dest.defined()) dest.add_(buf);
    cp->mutable_stats().bytes_sent[kind][1] += sent;
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

// ---- the delta-rule state chain ----

// Arguments: (o0, R, M, Q) of up to two local pieces (zigzag); R and M of global piece 0 and the
// second piece's four in the contiguous layout are zero-element placeholders. Returns each
// piece's o = o0 + R^T S_in: the outputs (not the states) leave the node, so that it is part of
// every rank's graph, piece 0's included, and its backward runs on every rank.
struct StateChainFn : torch::autograd::Function<StateChainFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& o0_0,
                               const torch::Tensor& R0, const torch::Tensor& M0,
                               const torch::Tensor& Q0, const torch::Tensor& o0_1,
                               const torch::Tensor& R1, const torch::Tensor& M1,
                               const torch::Tensor& Q1, int64_t shard) {
    auto* cp = reinterpret_cast<ContextParallel*>(shard);
    const double t0 = now_s();
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, pieces = l.piece_count();
    auto& comm = cp->comm();
    const std::array<torch::Tensor, 2> o0{o0_0, o0_1}, R{R0, R1}, M{M0, M1}, Q{Q0, Q1};
    std::array<torch::Tensor, 2> S_in, out;
    torch::Tensor carried;  // S_out of the previous local piece when it feeds the next
    std::vector<comm::WorkPtr> sends;
    std::vector<torch::Tensor> keep;
    int64_t sent = 0;
    for (size_t s = 0; s < mine.size(); ++s) {
      const int i = mine[s].index;
      if (i == 0) {
        S_in[s] = torch::zeros_like(Q[s]);
      } else if (l.owner(i - 1) == me) {
        S_in[s] = carried;
      } else {
        S_in[s] = torch::empty_like(Q[s]);
        comm.recv(S_in[s], l.owner(i - 1), kStateTag + i);
      }
      const torch::Tensor S_out = i == 0 ? Q[s] : torch::matmul(M[s], S_in[s]) + Q[s];
      if (i + 1 < pieces) {
        if (l.owner(i + 1) == me) {
          carried = S_out;
        } else {
          auto buf = S_out.contiguous();
          sent += comm::tensor_bytes(buf);
          sends.push_back(comm.send_async(buf, l.owner(i + 1), kStateTag + i + 1));
          keep.push_back(buf);
        }
      }
      // o = o0 + R^T S_in: [B, H, L, dk] x [B, H, dk, dv] -> [B, H, L, dv] -> [B, L, H, dv]
      out[s] = i == 0 ? o0[s].clone()
                      : o0[s] + torch::matmul(R[s].transpose(1, 2), S_in[s]).transpose(1, 2);
    }
    for (auto& w : sends) w->wait();
    cp->mutable_stats().bytes_sent[size_t(CpExchange::gdn_state)][0] += sent;
    cp->mutable_stats().state_chain_s += now_s() - t0;
    ctx->saved_data["shard"] = shard;
    const auto none = placeholder({}, Q0);
    ctx->save_for_backward({R0, M0, S_in[0], R1, M1, S_in[1].defined() ? S_in[1] : none});
    if (mine.size() == 1) out[1] = none.clone();
    return {out[0], out[1]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* cp = shard_of(ctx);
    const double t0 = now_s();
    const auto saved = ctx->get_saved_variables();
    const std::array<torch::Tensor, 2> R{saved[0], saved[3]}, M{saved[1], saved[4]},
        S_in{saved[2], saved[5]};
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, pieces = l.piece_count();
    auto& comm = cp->comm();
    std::array<torch::Tensor, 2> d_o0, dR, dM, dQ;
    torch::Tensor carried;  // dS_in of the next local piece when it is fed by this one
    std::vector<comm::WorkPtr> sends;
    std::vector<torch::Tensor> keep;
    int64_t sent = 0;
    for (size_t s = mine.size(); s-- > 0;) {
      const int i = mine[s].index;
      const torch::Tensor d_out = grads[s].defined() ? grads[s] : torch::Tensor();
      torch::Tensor dS_out;
      if (i + 1 == pieces) {
        dS_out = torch::zeros_like(S_in[s]);
      } else if (l.owner(i + 1) == me) {
        dS_out = carried;
      } else {
        dS_out = torch::empty_like(S_in[s]);
        comm.recv(dS_out, l.owner(i + 1), kStateTag + i + 1);
      }
      d_o0[s] = d_out;
      dQ[s] = dS_out;
      if (i == 0) continue;  // S_in = 0: nothing flows further back
      auto dS_in = torch::matmul(M[s].transpose(-1, -2), dS_out);
      dM[s] = torch::matmul(dS_out, S_in[s].transpose(-1, -2));
      if (d_out.defined()) {
        const auto d_out_t = d_out.transpose(1, 2);                       // [B, H, L, dv]
        dS_in = dS_in + torch::matmul(R[s].transpose(1, 2).transpose(-1, -2), d_out_t);
        dR[s] = torch::matmul(d_out_t, S_in[s].transpose(-1, -2)).transpose(1, 2);  // [B, L, H, dk]
      }
      if (l.owner(i - 1) == me) {
        carried = dS_in;
      } else {
        auto buf = dS_in.contiguous();
        sent += comm::tensor_bytes(buf);
        sends.push_back(comm.send_async(buf, l.owner(i - 1), kStateTag + i));
        keep.push_back(buf);
      }
    }
    for (auto& w : sends) w->wait();
    cp->mutable_stats().bytes_sent[size_t(CpExchange::gdn_state)][1] += sent;
    cp->mutable_stats().state_chain_s += now_s() - t0;
    return {d_o0[0], dR[0], dM[0], dQ[0], d_o0[1], dR[1], dM[1], dQ[1], torch::Tensor()};
  }
};

// The same as StateChainFn by the allgather scheme: every rank gathers every piece's (M, Q),
// merges the prefix of the states up to its own pieces, and in the backward gathers every
// piece's R dO and merges the suffix of the state gradients down to them. Same arguments and
// results as StateChainFn.
struct StateGatherFn : torch::autograd::Function<StateGatherFn> {
  // this rank's blocks (per local piece, in order: the flattened parts) all-gathered, and split
  // back into every global piece's parts: out[piece][part], in the given shapes
  static std::vector<std::vector<torch::Tensor>> gather_blocks(
      ContextParallel& cp, const std::vector<std::vector<torch::Tensor>>& local,
      const std::vector<std::vector<int64_t>>& shapes, int direction) {
    const SeqLayout& l = cp.layout();
    std::vector<torch::Tensor> flat;
    for (const auto& piece : local)
      for (const auto& part : piece) flat.push_back(part.contiguous().view(-1));
    const auto send = torch::cat(flat);
    const auto all = cp.comm().all_gather(send);  // [ranks, send.numel()]
    cp.mutable_stats().bytes_sent[size_t(CpExchange::gdn_state)][size_t(direction)] +=
        comm::tensor_bytes(send);
    std::vector<std::vector<torch::Tensor>> out(size_t(l.piece_count()));
    for (int r = 0; r < l.ranks; ++r) {
      int64_t offset = 0;
      for (const SeqPiece& p : l.pieces_of(r))
        for (const auto& shape : shapes) {
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          out[size_t(p.index)].push_back(all[r].narrow(0, offset, n).view(shape));
          offset += n;
        }
    }
    return out;
  }

  static variable_list forward(AutogradContext* ctx, const torch::Tensor& o0_0,
                               const torch::Tensor& R0, const torch::Tensor& M0,
                               const torch::Tensor& Q0, const torch::Tensor& o0_1,
                               const torch::Tensor& R1, const torch::Tensor& M1,
                               const torch::Tensor& Q1, int64_t shard) {
    auto* cp = reinterpret_cast<ContextParallel*>(shard);
    const double t0 = now_s();
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const std::array<torch::Tensor, 2> o0{o0_0, o0_1}, R{R0, R1}, M{M0, M1}, Q{Q0, Q1};
    const auto q_shape = Q0.sizes().vec();                         // [B, H, dk, dv]
    const std::vector<int64_t> m_shape{q_shape[0], q_shape[1], q_shape[2], q_shape[2]};
    std::vector<std::vector<torch::Tensor>> local;
    for (size_t s = 0; s < mine.size(); ++s)  // piece 0 has no transition: zeros, sent alike
      local.push_back({mine[s].index == 0 ? torch::zeros(m_shape, Q0.options()) : M[s], Q[s]});
    const auto blocks = gather_blocks(*cp, local, {m_shape, q_shape}, 0);
    // the states entering every piece up to this rank's last: S_out = M S_in + Q
    const int last = mine.back().index;
    std::vector<torch::Tensor> S_in(size_t(last + 1));
    torch::Tensor S;
    for (int i = 0; i <= last; ++i) {
      S_in[size_t(i)] = i == 0 ? torch::zeros(q_shape, Q0.options()) : S;
      S = i == 0 ? blocks[0][1] : torch::matmul(blocks[size_t(i)][0], S) + blocks[size_t(i)][1];
    }
    std::array<torch::Tensor, 2> out, local_S_in;
    for (size_t s = 0; s < mine.size(); ++s) {
      const int i = mine[s].index;
      local_S_in[s] = S_in[size_t(i)];
      out[s] = i == 0 ? o0[s].clone()
                      : o0[s] + torch::matmul(R[s].transpose(1, 2), local_S_in[s]).transpose(1, 2);
    }
    cp->mutable_stats().state_chain_s += now_s() - t0;
    ctx->saved_data["shard"] = shard;
    // every later piece's transition, for the backward's suffix (piece p: transitions[p])
    std::vector<torch::Tensor> transitions;
    for (const auto& b : blocks) transitions.push_back(b[0]);
    ctx->saved_data["transitions"] = transitions;
    const auto none = placeholder({}, Q0);
    ctx->save_for_backward({R0, local_S_in[0], R1, local_S_in[1].defined() ? local_S_in[1] : none});
    if (mine.size() == 1) out[1] = none.clone();
    return {out[0], out[1]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* cp = shard_of(ctx);
    const double t0 = now_s();
    const auto saved = ctx->get_saved_variables();
    const std::array<torch::Tensor, 2> R{saved[0], saved[2]}, S_in{saved[1], saved[3]};
    const auto transitions = ctx->saved_data["transitions"].toTensorVector();
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int pieces = l.piece_count();
    const auto q_shape = S_in[0].sizes().vec();  // [B, H, dk, dv]
    // each local piece's R dO = sum_t R_t dO_t^T (what its outputs ask of its incoming state)
    std::array<torch::Tensor, 2> d_out_t;
    std::vector<std::vector<torch::Tensor>> local;
    for (size_t s = 0; s < mine.size(); ++s) {
      torch::Tensor g = torch::zeros(q_shape, S_in[0].options());
      if (grads[s].defined() && mine[s].index > 0) {
        d_out_t[s] = grads[s].transpose(1, 2);  // [B, H, L, dv]
        g = torch::matmul(R[s].transpose(1, 2).transpose(-1, -2), d_out_t[s]);
      }
      local.push_back({g});
    }
    const auto G = gather_blocks(*cp, local, {q_shape}, 1);
    // the state gradients leaving every piece from the last down to this rank's first:
    // dS_out(j) = dS_in(j + 1) = G(j + 1) + M(j + 1)^T dS_out(j + 1)
    const int first = mine.front().index;
    std::vector<torch::Tensor> dS_out(static_cast<size_t>(pieces));
    torch::Tensor d = torch::zeros(q_shape, S_in[0].options());
    for (int j = pieces - 1; j >= first; --j) {
      dS_out[size_t(j)] = d;
      if (j > 0) d = G[size_t(j)][0] + torch::matmul(transitions[size_t(j)].transpose(-1, -2), d);
    }
    std::array<torch::Tensor, 2> d_o0, dR, dM, dQ;
    for (size_t s = 0; s < mine.size(); ++s) {
      const int i = mine[s].index;
      d_o0[s] = grads[s];
      dQ[s] = dS_out[size_t(i)];
      if (i == 0) continue;  // S_in = 0: nothing flows further back
      dM[s] = torch::matmul(dS_out[size_t(i)], S_in[s].transpose(-1, -2));
      if (d_out_t[s].defined())
        dR[s] = torch::matmul(d_out_t[s], S_in[s].transpose(-1, -2)).transpose(1, 2);
    }
    cp->mutable_stats().state_chain_s += now_s() - t0;
    return {d_o0[0], dR[0], dM[0], dQ[0], d_o0[1], dR[1], dM[1], dQ[1], torch::Tensor()};
  }
};

// ---- attention ----

// Softmax attention of query rows at [q_begin, ..) over keys at [k_begin, ..) (S layers: a piece
// and its halo). Grouped layout (model/blocked_attention.h).
struct RangedAttentionFn : torch::autograd::Function<RangedAttentionFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, int64_t q_begin,
                               int64_t k_begin, int64_t group, int64_t window) {
    auto rows = model::attention_rows_start(q);
    model::attention_rows_add(rows, q, q_begin, k, v, k_begin, group, window);
    auto [out, lse] = model::attention_rows_finish(rows);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["q_begin"] = q_begin;
    ctx->saved_data["k_begin"] = k_begin;
    ctx->saved_data["group"] = group;
    ctx->saved_data["window"] = window;
    return {out};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const auto d_out = grads[0].contiguous();
    const auto delta = (d_out * s[3]).sum(-1);
    auto dq = torch::zeros_like(s[0]), dk = torch::zeros_like(s[1]), dv = torch::zeros_like(s[2]);
    model::attention_rows_backward(s[0], ctx->saved_data["q_begin"].toInt(), d_out, s[4], delta,
                                   s[1], s[2], ctx->saved_data["k_begin"].toInt(),
                                   ctx->saved_data["group"].toInt(),
                                   ctx->saved_data["window"].toInt(), dq, dk, dv);
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Query x key pairs causal attention scores between query piece q and key piece k.
int64_t visible_pairs(const SeqPiece& q, const SeqPiece& k) {
  if (k.begin > q.end() - 1) return 0;
  if (k.end() <= q.begin) return q.length * k.length;
  return q.length * (q.length + 1) / 2;  // the piece itself: the causal triangle
}

// Ring attention over the cp group. q [N, L * g, hd] grouped rows, k, v [N, L, hd] (L = local
// length, the local pieces concatenated), contiguous, one float dtype.
struct RingAttentionFn : torch::autograd::Function<RingAttentionFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, int64_t group,
                               int64_t shard) {
    auto* cp = reinterpret_cast<ContextParallel*>(shard);
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, p = l.ranks;
    auto& comm = cp->comm();
    auto rows = model::attention_rows_start(q);
    const int64_t kv_numel = k.numel();
    torch::Tensor held = torch::cat({k.reshape({-1}), v.reshape({-1})});
    int64_t sent = 0;
    for (int step = 0; step < p; ++step) {
      const int src = (me - step + p) % p;
      torch::Tensor next;
      std::vector<comm::WorkPtr> work;
      if (step + 1 < p) {  // pass the block on while this step's tiles run
        next = torch::empty_like(held);
        work.push_back(comm.send_async(held, (me + 1) % p, kRingTag + step));
        work.push_back(comm.recv_async(next, (me - 1 + p) % p, kRingTag + step));
        sent += comm::tensor_bytes(held);
      }
      const double t0 = now_s();
      const auto hk = held.narrow(0, 0, kv_numel).view(k.sizes());
      const auto hv = held.narrow(0, kv_numel, kv_numel).view(v.sizes());
      for (const SeqPiece& qp : mine) {
        auto q_rows = q.narrow(1, qp.local_begin * group, qp.length * group);
        auto acc = model::AttentionRows{
            rows.row_max.narrow(1, qp.local_begin * group, qp.length * group),
            rows.row_sum.narrow(1, qp.local_begin * group, qp.length * group),
            rows.acc.narrow(1, qp.local_begin * group, qp.length * group)};
        for (const SeqPiece& kp : l.pieces_of(src)) {
          if (kp.begin > qp.end() - 1) continue;  // all in the future
          model::attention_rows_add(acc, q_rows, qp.begin, hk.narrow(1, kp.local_begin, kp.length),
                                    hv.narrow(1, kp.local_begin, kp.length), kp.begin, group, 0);
          cp->mutable_stats().attention_score_entries += visible_pairs(qp, kp);
        }
      }
      cp->mutable_stats().attention_s += now_s() - t0;
      for (auto& w : work) w->wait();
      if (next.defined()) held = next;
    }
    auto [out, lse] = model::attention_rows_finish(rows);
    cp->mutable_stats().bytes_sent[size_t(CpExchange::ring_kv)][0] += sent;
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["shard"] = shard;
    ctx->saved_data["group"] = group;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* cp = shard_of(ctx);
    const int64_t group = ctx->saved_data["group"].toInt();
    const auto s = ctx->get_saved_variables();
    const auto &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4];
    const SeqLayout& l = cp->layout();
    const auto mine = l.local_pieces();
    const int me = l.rank, p = l.ranks;
    auto& comm = cp->comm();
    const auto d_out = grads[0].contiguous();
    const auto delta = (d_out * out).sum(-1);
    auto dq = torch::zeros_like(q);
    const int64_t n = k.numel();
    // the travelling block: k, v, and the dK, dV accumulated for it so far
    torch::Tensor held = torch::cat({k.reshape({-1}), v.reshape({-1}), torch::zeros({2 * n}, k.options())});
    int64_t sent = 0;
    for (int step = 0; step < p; ++step) {
      const int src = (me - step + p) % p;
      const double t0 = now_s();
      const auto hk = held.narrow(0, 0, n).view(k.sizes());
      const auto hv = held.narrow(0, n, n).view(v.sizes());
      auto hdk = held.narrow(0, 2 * n, n).view(k.sizes());
      auto hdv = held.narrow(0, 3 * n, n).view(v.sizes());
      for (const SeqPiece& qp : mine) {
        const auto r = [&](const torch::Tensor& x) {
          return x.narrow(1, qp.local_begin * group, qp.length * group);
        };
        auto dq_rows = r(dq);
        for (const SeqPiece& kp : l.pieces_of(src)) {
          if (kp.begin > qp.end() - 1) continue;
          auto dk_piece = hdk.narrow(1, kp.local_begin, kp.length);
          auto dv_piece = hdv.narrow(1, kp.local_begin, kp.length);
          model::attention_rows_backward(r(q), qp.begin, r(d_out), r(lse), r(delta),
                                         hk.narrow(1, kp.local_begin, kp.length),
                                         hv.narrow(1, kp.local_begin, kp.length), kp.begin, group,
                                         0, dq_rows, dk_piece, dv_piece);
        }
      }
      cp->mutable_stats().attention_s += now_s() - t0;
      // shift: k, v and their gradients on to the next rank; after the p-th shift every block's
      // gradients are back at its owner (the last shift carries the gradients only)
      auto payload = step + 1 < p ? held : held.narrow(0, 2 * n, 2 * n).contiguous();
      auto next = torch::empty_like(payload);
      auto sw = comm.send_async(payload, (me + 1) % p, kRingTag + p + step);
      auto rw = comm.recv_async(next, (me - 1 + p) % p, kRingTag + p + step);
      sent += comm::tensor_bytes(payload);
      sw->wait();
      rw->wait();
      held = next;
    }
    cp->mutable_stats().bytes_sent[size_t(CpExchange::ring_kv)][1] += sent;
    auto dk = held.narrow(0, 0, n).view(k.sizes());
    auto dv = held.narrow(0, n, n).view(v.sizes());
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

// ---- head re-sharding (the all-to-all schemes) ----

CpExchange head_kind(model::ContextShard::HeadLayer layer) {
  return layer == model::ContextShard::HeadLayer::gdn ? CpExchange::gdn_heads
                                                      : CpExchange::attn_heads;
}

// Rank r's local tokens (its pieces concatenated) as global positions, [local_len] int64.
torch::Tensor positions_of(const SeqLayout& l, int rank, const torch::Device& device) {
  SeqLayout other = l;
  other.rank = rank;
  return other.positions(device);
}

// One equal-count all-to-all of `send` [p, *S] (block j for rank j) into [p, *S] (block r from
// rank r), counted as `kind` in direction `dir`.
torch::Tensor exchange_blocks(ContextParallel& cp, const torch::Tensor& send, CpExchange kind,
                              int dir) {
  const int p = cp.layout().ranks;
  auto recv = torch::empty_like(send);
  const int64_t block = send.numel() / p;
  const std::vector<int64_t> counts(size_t(p), block);
  cp.comm().all_to_all(send, recv, counts, counts);
  cp.mutable_stats().bytes_sent[size_t(kind)][size_t(dir)] +=
      int64_t(p - 1) * block * int64_t(send.element_size());
  return recv;
}

// [B, L, H, d] sequence-sharded -> [B, T, H / p, d] head-sharded (every position in order).
torch::Tensor seq_to_heads(ContextParallel& cp, const torch::Tensor& x, CpExchange kind, int dir) {
  const SeqLayout& l = cp.layout();
  const int p = l.ranks;
  const int64_t B = x.size(0), L = x.size(1), H = x.size(2), d = x.size(3), Hp = H / p;
  // block j: my tokens of rank j's heads
  auto send = x.reshape({B, L, p, Hp, d}).permute({2, 0, 1, 3, 4}).contiguous();
  auto recv = exchange_blocks(cp, send, kind, dir);  // [p, B, L, Hp, d]: rank r's tokens
  auto out = torch::empty({B, l.seq_len, Hp, d}, x.options());
  for (int r = 0; r < p; ++r)
    out.index_copy_(1, positions_of(l, r, x.device()), recv[r]);
  return out;
}

// The inverse: [B, T, H / p, d] -> [B, L, H, d].
torch::Tensor heads_to_seq(ContextParallel& cp, const torch::Tensor& y, CpExchange kind, int dir) {
  const SeqLayout& l = cp.layout();
  const int p = l.ranks;
  const int64_t B = y.size(0), Hp = y.size(2), d = y.size(3), L = l.local_len();
  std::vector<torch::Tensor> blocks;  // block r: rank r's tokens of my heads
  for (int r = 0; r < p; ++r) blocks.push_back(y.index_select(1, positions_of(l, r, y.device())));
  auto recv = exchange_blocks(cp, torch::stack(blocks), kind, dir);  // [p, B, L, Hp, d]
  return recv.permute({1, 2, 0, 3, 4}).reshape({B, L, p * Hp, d});
}

// The re-sharding as an autograd Function: forward one way (to heads when ToHeads), backward
// the gradient the other way.
template <bool ToHeads>
struct ReshardFn : torch::autograd::Function<ReshardFn<ToHeads>> {
  static torch::Tensor move(ContextParallel& cp, const torch::Tensor& t, int64_t kind,
                            bool to_heads, int dir) {
    return to_heads ? seq_to_heads(cp, t, CpExchange(kind), dir)
                    : heads_to_seq(cp, t, CpExchange(kind), dir);
  }
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kind,
                               int64_t shard) {
    ctx->saved_data["shard"] = shard;
    ctx->saved_data["kind"] = kind;
    return {move(*reinterpret_cast<ContextParallel*>(shard), x, kind, ToHeads, 0)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {move(*shard_of(ctx), grads[0].contiguous(), ctx->saved_data["kind"].toInt(),
                 !ToHeads, 1),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

const char* cp_exchange_name(CpExchange kind) {
  switch (kind) {
    case CpExchange::conv_halo: return "conv_halo";
    case CpExchange::gdn_state: return "gdn_state";
    case CpExchange::window_halo: return "window_halo";
    case CpExchange::ring_kv: return "ring_kv";
    case CpExchange::gdn_heads: return "gdn_heads";
    case CpExchange::attn_heads: return "attn_heads";
    case CpExchange::count: break;
  }
  return "unknown";
}

ContextParallel::ContextParallel(std::shared_ptr<comm::Communicator> cp_comm, int64_t seq_len,
                                 bool zigzag, CpScheme scheme, CpAttention attention)
    : comm_(std::move(cp_comm)),
      layout_(model::make_seq_layout(seq_len, comm_->size(), comm_->rank(), zigzag)),
      scheme_(scheme),
      attention_(attention) {}

bool ContextParallel::heads_sharded(HeadLayer layer) const {
  return layer == HeadLayer::gdn ? scheme_ == CpScheme::alltoall
                                 : attention_ == CpAttention::alltoall;
}

torch::Tensor ContextParallel::to_heads(const torch::Tensor& x, HeadLayer layer) {
  return ReshardFn<true>::apply(x, int64_t(head_kind(layer)), reinterpret_cast<int64_t>(this))[0];
}

torch::Tensor ContextParallel::to_sequence(const torch::Tensor& x, HeadLayer layer) {
  return ReshardFn<false>::apply(x, int64_t(head_kind(layer)), reinterpret_cast<int64_t>(this))[0];
}

std::vector<torch::Tensor> ContextParallel::halo(const torch::Tensor& x, int64_t n) {
  return HaloFn::apply(x, n, reinterpret_cast<int64_t>(this));
}

std::vector<torch::Tensor> ContextParallel::state_chain(const std::vector<GdnPiece>& pieces) {
  const auto& like = pieces.at(0).Q;
  auto arg = [&](size_t i, torch::Tensor GdnPiece::*field) {
    return i < pieces.size() ? placeholder(pieces[i].*field, like) : placeholder({}, like);
  };
  const int64_t self = reinterpret_cast<int64_t>(this);
  auto out = scheme_ == CpScheme::allgather
                 ? StateGatherFn::apply(arg(0, &GdnPiece::o0), arg(0, &GdnPiece::R),
                                        arg(0, &GdnPiece::M), arg(0, &GdnPiece::Q),
                                        arg(1, &GdnPiece::o0), arg(1, &GdnPiece::R),
                                        arg(1, &GdnPiece::M), arg(1, &GdnPiece::Q), self)
                 : StateChainFn::apply(arg(0, &GdnPiece::o0), arg(0, &GdnPiece::R),
                                       arg(0, &GdnPiece::M), arg(0, &GdnPiece::Q),
                                       arg(1, &GdnPiece::o0), arg(1, &GdnPiece::R),
                                       arg(1, &GdnPiece::M), arg(1, &GdnPiece::Q), self);
  out.resize(pieces.size());
  return out;
}

torch::Tensor ContextParallel::attention(const torch::Tensor& q, const torch::Tensor& k,
                                         const torch::Tensor& v, int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3);
  const int64_t kv_heads = k.size(1), group = H / kv_heads;
  const auto dtype = q.scalar_type();
  const bool reduced = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  const auto compute = reduced ? torch::kFloat32 : dtype;
  model::NoAutocastGuard no_autocast;  // tiles in `compute` (see blocked_attention.cpp)
  auto q_rows = model::group_queries(q.to(compute), kv_heads);  // [N, L * g, hd]
  torch::Tensor out;
  if (window <= 0) {
    auto k_flat = k.to(compute).reshape({B * kv_heads, L, hd}).contiguous();
    auto v_flat = v.to(compute).reshape({B * kv_heads, L, hd}).contiguous();
    out = RingAttentionFn::apply(q_rows, k_flat, v_flat, group, reinterpret_cast<int64_t>(this))[0];
  } else {
    // S layers: the window - 1 keys and values before each piece, in one halo of [B, L, 2 KVH hd]
    auto kv = torch::cat({k.to(compute).transpose(1, 2).reshape({B, L, kv_heads * hd}),
                          v.to(compute).transpose(1, 2).reshape({B, L, kv_heads * hd})}, -1);
    const CpExchange previous = halo_kind_;
    halo_kind_ = CpExchange::window_halo;
    const auto halos = halo(kv, window - 1);
    halo_kind_ = previous;
    const auto pieces = layout_.local_pieces();
    std::vector<torch::Tensor> outs;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const SeqPiece& p = pieces[i];
      const int64_t h = halos[i].size(1);
      // [B, h + len, 2 KVH hd] -> k, v [N, h + len, hd]
      auto joined = torch::cat({halos[i], kv.narrow(1, p.local_begin, p.length)}, 1);
      auto to_rows = [&](int64_t half) {
        return joined.narrow(2, half * kv_heads * hd, kv_heads * hd)
            .reshape({B, h + p.length, kv_heads, hd}).transpose(1, 2)
            .reshape({B * kv_heads, h + p.length, hd}).contiguous();
      };
      auto q_piece = q_rows.narrow(1, p.local_begin * group, p.length * group).contiguous();
      outs.push_back(RangedAttentionFn::apply(q_piece, to_rows(0), to_rows(1), p.begin,
                                              p.begin - h, group, window)[0]);
    }
    out = outs.size() == 1 ? outs[0] : torch::cat(outs, 1);
  }
  return model::ungroup_queries(out, B, H, kv_heads).to(dtype);
}

}  // namespace hlp::parallel
