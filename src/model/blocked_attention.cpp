#include "model/blocked_attention.h"
#include "model/autocast_state.h"

#include <cmath>
#include <limits>

namespace hlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Geometry of one call, shared by forward and backward.
struct Tiling {
  int64_t seq_len;  // T
  int64_t group;    // g = H / KVH: rows per position in the grouped layout
  int64_t window;   // <= 0: full causal
  int64_t block;    // positions per tile side
  double scale;     // 1 / sqrt(hd)

  PositionRange query_block(int64_t q_begin) const {
    return {q_begin, std::min(seq_len, q_begin + block)};
  }
  PositionRange key_block(int64_t index) const {
    return {index * block, std::min(seq_len, (index + 1) * block)};
  }
  // The rows of positions `p` in the grouped layout [N, T * g, hd].
  torch::Tensor rows(const torch::Tensor& grouped, PositionRange p) const {
    return grouped.narrow(1, p.begin * group, (p.end - p.begin) * group);
  }
  static torch::Tensor keys(const torch::Tensor& t, PositionRange p) {
    return t.narrow(1, p.begin, p.end - p.begin);
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

class BlockedAttentionFunction : public torch::autograd::Function<BlockedAttentionFunction> {
 public:
  // q: [N, T * g, hd] grouped rows; k, v: [N, T, hd]; all contiguous, same dtype.
  // Returns {out [N, T * g, hd]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, int64_t group,
                               int64_t window, int64_t block) {
    const Tiling t{k.size(1), group, window, block, 1.0 / std::sqrt(double(q.size(2)))};
    auto out = torch::empty_like(q);
    auto lse = torch::empty({q.size(0), q.size(1)}, q.options());  // [N, T * g]
    for (int64_t q_begin = 0; q_begin < t.seq_len; q_begin += block) {
      const PositionRange qr = t.query_block(q_begin);
      const auto q_tile = t.rows(q, qr);  // [N, rows, hd]
      const PositionRange blocks = visited_key_blocks(qr, window, block);
      torch::Tensor row_max, row_sum, acc;  // [N, rows], [N, rows], [N, rows, hd]
      // Newest key block first: it holds the diagonal, where every query sees itself, so the
      // running max is finite from the first tile on (no -inf - -inf = NaN for rows whose
      // window misses an older tile entirely).
      for (int64_t b = blocks.end - 1; b >= blocks.begin; --b) {
        const PositionRange kr = t.key_block(b);
        auto p = tile_scores(t, q_tile, Tiling::keys(k, kr), qr, kr);  // [N, rows, keys]
        const auto v_tile = Tiling::keys(v, kr);
        if (!acc.defined()) {
          row_max = p.amax(-1);
          p.sub_(row_max.unsqueeze(-1)).exp_();
          row_sum = p.sum(-1);
          acc = torch::bmm(p, v_tile);
          continue;
        }
        auto new_max = torch::maximum(row_max, p.amax(-1));
        auto correction = (row_max - new_max).exp_();  // rescales what was summed so far
        p.sub_(new_max.unsqueeze(-1)).exp_();
        row_sum.mul_(correction).add_(p.sum(-1));
        acc.mul_(correction.unsqueeze(-1)).baddbmm_(p, v_tile);
        row_max = new_max;
      }
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
    const Tiling t{k.size(1), group, window, block, 1.0 / std::sqrt(double(q.size(2)))};

    const auto d_out = grad_outputs[0].contiguous();  // [N, T * g, hd]
    const auto delta = (d_out * out).sum(-1);         // [N, T * g]: rowsum(dO * O)
    auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
    for (int64_t q_begin = 0; q_begin < t.seq_len; q_begin += block) {
      const PositionRange qr = t.query_block(q_begin);
      const auto q_tile = t.rows(q, qr), d_out_tile = t.rows(d_out, qr);  // [N, rows, hd]
      auto dq_tile = t.rows(dq, qr);
      const auto lse_tile = lse.narrow(1, qr.begin * group, (qr.end - qr.begin) * group);
      const auto delta_tile = delta.narrow(1, qr.begin * group, (qr.end - qr.begin) * group);
      const PositionRange blocks = visited_key_blocks(qr, window, block);
      for (int64_t b = blocks.begin; b < blocks.end; ++b) {
        const PositionRange kr = t.key_block(b);
        const auto k_tile = Tiling::keys(k, kr), v_tile = Tiling::keys(v, kr);
        // P = exp(S - lse): the forward's probabilities, hidden entries exp(-inf) = 0
        auto p = tile_scores(t, q_tile, k_tile, qr, kr).sub_(lse_tile.unsqueeze(-1)).exp_();
        Tiling::keys(dv, kr).baddbmm_(p.transpose(1, 2), d_out_tile);  // dV += P^T dO
        // dS = P * (dO V^T - delta) * scale  (softmax backward, then the score scale)
        auto ds = torch::bmm(d_out_tile, v_tile.transpose(1, 2));
        ds.sub_(delta_tile.unsqueeze(-1)).mul_(p).mul_(t.scale);
        dq_tile.baddbmm_(ds, k_tile);                                  // dQ += dS K
        Tiling::keys(dk, kr).baddbmm_(ds.transpose(1, 2), q_tile);     // dK += dS^T Q
      }
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

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
  // [B, H, T, hd] -> [B, KVH, g, T, hd] -> [B, KVH, T, g, hd] -> [N = B * KVH, T * g, hd]
  auto q_grouped = q.to(compute).view({B, kv_heads, group, T, hd}).transpose(2, 3)
                       .reshape({B * kv_heads, T * group, hd}).contiguous();
  // [B, KVH, T, hd] -> [N, T, hd]
  auto k_flat = k.to(compute).reshape({B * kv_heads, T, hd}).contiguous();
  auto v_flat = v.to(compute).reshape({B * kv_heads, T, hd}).contiguous();
  auto out = BlockedAttentionFunction::apply(q_grouped, k_flat, v_flat, group, window, block)[0];
  // [N, T * g, hd] -> [B, KVH, T, g, hd] -> [B, KVH, g, T, hd] -> [B, H, T, hd]
  return out.view({B, kv_heads, T, group, hd}).transpose(2, 3).reshape({B, H, T, hd})
      .to(q.scalar_type());
}

}  // namespace hlp::model
