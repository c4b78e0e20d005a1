#include "model/blocked_attention.h"
#include "model/autocast_state.h"

#include <cmath>
#include <limits>

namespace hlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Geometry of one call, shared by forward and backward. Queries and keys sit at global
// positions [q_begin, q_begin + q_len) and [k_begin, k_begin + k_len) (both 0 and the whole
// sequence for plain attention; a piece of the sequence under context parallelism). Tiles are
// aligned to the start of each range.
struct Tiling {
  int64_t q_begin, q_len, k_begin, k_len;
  int64_t group;   // g = H / KVH: rows per position in the grouped layout
  int64_t window;  // <= 0: full causal
  int64_t block;   // positions per tile side
  double scale;    // 1 / sqrt(hd)

  PositionRange query_block(int64_t q_pos) const {
    return {q_pos, std::min(q_begin + q_len, q_pos + block)};
  }
  int64_t key_blocks() const { return (k_len + block - 1) / block; }
  PositionRange key_block(int64_t index) const {
    return {k_begin + index * block, std::min(k_begin + k_len, k_begin + (index + 1) * block)};
  }
  // Key blocks [first, end) that some query of `q` may see.
  PositionRange visited(PositionRange q) const {
    const PositionRange keys = visible_keys(q, window);
    const int64_t lo = std::max(keys.begin, k_begin), hi = std::min(keys.end, k_begin + k_len);
    if (lo >= hi) return {0, 0};
    return {(lo - k_begin) / block, (hi - 1 - k_begin) / block + 1};
  }
  // The rows of global positions `p` in the grouped layout [N, q_len * g, hd].
  torch::Tensor rows(const torch::Tensor& grouped, PositionRange p) const {
    return grouped.narrow(1, (p.begin - q_begin) * group, (p.end - p.begin) * group);
  }
  torch::Tensor keys(const torch::Tensor& t, PositionRange p) const {
    return t.narrow(1, p.begin - k_begin, p.end - p.begin);
  }
};

// [rows, keys] bool, true where query row (position q.begin + r / g) must not see the key.
torch::Tensor hidden_mask(const Tiling& t, PositionRange q, PositionRange k,
                          const torch::Device& device) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q_pos = torch::arange(q.begin, q.end, opts).repeat_interleave(t.group).unsqueeze(1);
  auto k_pos = torch::arange(k.begin, k.end, opts).unsqueeze(0);
  auto distance = q_pos - k_pos;  // [rows, keys]: i - j
  auto hidden = distance < 0;
  if (t.window > 0) hidden = hidden | (distance >= t.window);
  return hidden;
}

// Scaled scores of one tile, hidden entries -inf. q_tile [N, rows, hd], k_tile [N, keys, hd]
// -> [N, rows, keys].
torch::Tensor tile_scores(const Tiling& t, const torch::Tensor& q_tile, const torch::Tensor& k_tile,
                          PositionRange q, PositionRange k) {
  auto scores = torch::bmm(q_tile, k_tile.transpose(1, 2)).mul_(t.scale);
  if (!tile_fully_visible(q, k, t.window))
    scores.masked_fill_(hidden_mask(t, q, k, scores.device()),
                        -std::numeric_limits<double>::infinity());
  return scores;
}

// Online softmax of query block `qr` over the key blocks it sees, newest first. `fresh`: the
// running (row_max, row_sum, acc) of these rows start with the first tile (they are assigned);
// else they hold earlier tiles' sums (another call's keys) and are updated in place. Newest first
// because that block holds the diagonal, where every query sees itself, so a fresh running max
// is finite from the first tile on (no -inf - -inf = NaN for rows whose window misses an older
// tile entirely); a row that has seen nothing yet in a merged update is guarded the same way.
void forward_query_block(const Tiling& t, const torch::Tensor& q_tile, PositionRange qr,
                         const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& row_max,
                         torch::Tensor& row_sum, torch::Tensor& acc, bool fresh) {
  const PositionRange blocks = t.visited(qr);
  for (int64_t b = blocks.end - 1; b >= blocks.begin; --b) {
    const PositionRange kr = t.key_block(b);
    auto p = tile_scores(t, q_tile, t.keys(k, kr), qr, kr);  // [N, rows, keys]
    const auto v_tile = t.keys(v, kr);
    if (fresh) {
      row_max = p.amax(-1);
      p.sub_(row_max.unsqueeze(-1)).exp_();
      row_sum = p.sum(-1);
      acc = torch::bmm(p, v_tile);
      fresh = false;
      continue;
    }
    auto new_max = torch::maximum(row_max, p.amax(-1));
    // rows with no visible key so far keep max -inf: subtract 0 there (exp(-inf) = 0, no NaN)
    auto safe_max = new_max.masked_fill(new_max.isinf(), 0.0);
    auto correction = (row_max - safe_max).exp_();  // rescales what was summed so far
    p.sub_(safe_max.unsqueeze(-1)).exp_();
    row_sum.mul_(correction).add_(p.sum(-1));
    acc.mul_(correction.unsqueeze(-1)).baddbmm_(p, v_tile);
    row_max.copy_(new_max);
  }
}

// dq, dk, dv of query block `qr` over the key blocks it sees, P recomputed from the final lse.
void backward_query_block(const Tiling& t, const torch::Tensor& q_tile,
                          const torch::Tensor& d_out_tile, const torch::Tensor& lse_tile,
                          const torch::Tensor& delta_tile, PositionRange qr,
                          const torch::Tensor& k, const torch::Tensor& v, torch::Tensor dq_tile,
                          torch::Tensor& dk, torch::Tensor& dv) {
  const PositionRange blocks = t.visited(qr);
  for (int64_t b = blocks.begin; b < blocks.end; ++b) {
    const PositionRange kr = t.key_block(b);
    const auto k_tile = t.keys(k, kr), v_tile = t.keys(v, kr);
    // P = exp(S - lse): the forward's probabilities, hidden entries exp(-inf) = 0
    auto p = tile_scores(t, q_tile, k_tile, qr, kr).sub_(lse_tile.unsqueeze(-1)).exp_();
    t.keys(dv, kr).baddbmm_(p.transpose(1, 2), d_out_tile);  // dV += P^T dO
    // dS = P * (dO V^T - delta) * scale  (softmax backward, then the score scale)
    auto ds = torch::bmm(d_out_tile, v_tile.transpose(1, 2));
    ds.sub_(delta_tile.unsqueeze(-1)).mul_(p).mul_(t.scale);
    dq_tile.baddbmm_(ds, k_tile);                        // dQ += dS K
    t.keys(dk, kr).baddbmm_(ds.transpose(1, 2), q_tile);  // dK += dS^T Q
  }
}

Tiling make_tiling(const torch::Tensor& q, int64_t q_begin, const torch::Tensor& k,
                   int64_t k_begin, int64_t group, int64_t window, int64_t block) {
  return Tiling{q_begin, q.size(1) / group, k_begin, k.size(1), group, window, block,
                1.0 / std::sqrt(double(q.size(2)))};
}

class BlockedAttentionFunction : public torch::autograd::Function<BlockedAttentionFunction> {
 public:
  // q: [N, T * g, hd] grouped rows; k, v: [N, T, hd]; all contiguous, same dtype.
  // Returns {out [N, T * g, hd]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, int64_t group,
                               int64_t window, int64_t block) {
    const Tiling t = make_tiling(q, 0, k, 0, group, window, block);
    auto out = torch::empty_like(q);
    auto lse = torch::empty({q.size(0), q.size(1)}, q.options());  // [N, T * g]
    for (int64_t q_begin = 0; q_begin < t.q_len; q_begin += block) {
      const PositionRange qr = t.query_block(q_begin);
      torch::Tensor row_max, row_sum, acc;  // [N, rows], [N, rows], [N, rows, hd]
      forward_query_block(t, t.rows(q, qr), qr, k, v, row_max, row_sum, acc, /*fresh=*/true);
      t.rows(out, qr).copy_(acc.div_(row_sum.unsqueeze(-1)));
      lse.narrow(1, qr.begin * group, (qr.end - qr.begin) * group)
          .copy_(row_max.add_(row_sum.log_()));
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["group"] = group;
    ctx->saved_data["window"] = window;
    ctx->saved_data["block"] = block;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t group = ctx->saved_data["group"].toInt();
    const int64_t window = ctx->saved_data["window"].toInt();
    const int64_t block = ctx->saved_data["block"].toInt();
    const Tiling t = make_tiling(q, 0, k, 0, group, window, block);

    const auto d_out = grad_outputs[0].contiguous();  // [N, T * g, hd]
    const auto delta = (d_out * out).sum(-1);         // [N, T * g]: rowsum(dO * O)
    auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    for (int64_t q_begin = 0; q_begin < t.q_len; q_begin += block) {
      const PositionRange qr = t.query_block(q_begin);
      const auto rows = [&](const torch::Tensor& x) {
        return x.narrow(1, qr.begin * group, (qr.end - qr.begin) * group);
      };
      backward_query_block(t, t.rows(q, qr), t.rows(d_out, qr), rows(lse), rows(delta), qr, k, v,
                           t.rows(dq, qr), dk, dv);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

AttentionRows attention_rows_start(const torch::Tensor& q) {
  return {torch::full({q.size(0), q.size(1)}, -std::numeric_limits<double>::infinity(),
                      q.options()),
          torch::zeros({q.size(0), q.size(1)}, q.options()), torch::zeros_like(q)};
}

void attention_rows_add(AttentionRows& a, const torch::Tensor& q, int64_t q_begin,
                        const torch::Tensor& k, const torch::Tensor& v, int64_t k_begin,
                        int64_t group, int64_t window, int64_t block) {
  const Tiling t = make_tiling(q, q_begin, k, k_begin, group, window, block);
  for (int64_t pos = q_begin; pos < q_begin + t.q_len; pos += block) {
    const PositionRange qr = t.query_block(pos);
    auto row_max = t.rows(a.row_max.unsqueeze(-1), qr).squeeze(-1);
    auto row_sum = t.rows(a.row_sum.unsqueeze(-1), qr).squeeze(-1);
    auto acc = t.rows(a.acc, qr);
    forward_query_block(t, t.rows(q, qr), qr, k, v, row_max, row_sum, acc, /*fresh=*/false);
  }
}

std::pair<torch::Tensor, torch::Tensor> attention_rows_finish(const AttentionRows& a) {
  return {a.acc / a.row_sum.unsqueeze(-1), a.row_max + a.row_sum.log()};
}

void attention_rows_backward(const torch::Tensor& q, int64_t q_begin, const torch::Tensor& d_out,
                             const torch::Tensor& lse, const torch::Tensor& delta,
                             const torch::Tensor& k, const torch::Tensor& v, int64_t k_begin,
                             int64_t group, int64_t window, torch::Tensor& dq, torch::Tensor& dk,
                             torch::Tensor& dv, int64_t block) {
  const Tiling t = make_tiling(q, q_begin, k, k_begin, group, window, block);
  for (int64_t pos = q_begin; pos < q_begin + t.q_len; pos += block) {
    const PositionRange qr = t.query_block(pos);
    const auto rows = [&](const torch::Tensor& x) { return t.rows(x.unsqueeze(-1), qr).squeeze(-1); };
    backward_query_block(t, t.rows(q, qr), t.rows(d_out, qr), rows(lse), rows(delta), qr, k, v,
                         t.rows(dq, qr), dk, dv);
  }
}

torch::Tensor group_queries(const torch::Tensor& q, int64_t kv_heads) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3), group = H / kv_heads;
  // [B, H, T, hd] -> [B, KVH, g, T, hd] -> [B, KVH, T, g, hd] -> [N = B * KVH, T * g, hd]
  return q.view({B, kv_heads, group, T, hd}).transpose(2, 3)
      .reshape({B * kv_heads, T * group, hd}).contiguous();
}

torch::Tensor ungroup_queries(const torch::Tensor& rows, int64_t batch, int64_t heads,
                              int64_t kv_heads) {
  const int64_t group = heads / kv_heads, T = rows.size(1) / group, hd = rows.size(2);
  // [N, T * g, hd] -> [B, KVH, T, g, hd] -> [B, KVH, g, T, hd] -> [B, H, T, hd]
  return rows.view({batch, kv_heads, T, group, hd}).transpose(2, 3).reshape({batch, heads, T, hd});
}

torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t window, int64_t block) {
  TORCH_CHECK(block > 0, "blocked_attention: block must be > 0");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
  const int64_t kv_heads = k.size(1), group = H / kv_heads;
  TORCH_CHECK(group * kv_heads == H, "blocked_attention: ", kv_heads, " KV heads do not divide ",
              H, " query heads");
  const auto dtype = q.scalar_type();
  const bool reduced = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  const auto compute = reduced ? torch::kFloat32 : dtype;
  // The tiles are computed in `compute` whatever autocast says: under CPU/CUDA autocast its
  // bmm would come back in bf16/fp16 and meet float32 running sums in the in-place updates
  // (LibTorch 2.x rejects that mix; 1.13 silently summed in bf16). Backward runs outside
  // autocast anyway.
  NoAutocastGuard no_autocast;
  auto q_grouped = group_queries(q.to(compute), kv_heads);
  // [B, KVH, T, hd] -> [N, T, hd]
  auto k_flat = k.to(compute).reshape({B * kv_heads, T, hd}).contiguous();
  auto v_flat = v.to(compute).reshape({B * kv_heads, T, hd}).contiguous();
  auto out = BlockedAttentionFunction::apply(q_grouped, k_flat, v_flat, group, window, block)[0];
  return ungroup_queries(out, B, H, kv_heads).to(q.scalar_type());
}

}  // namespace hlp::model
