#pragma once
// Which (query block, key block) tiles the blocked attention kernel visits. Plain integer
// arithmetic, no LibTorch: the kernel (blocked_attention.cpp) and the FLOP accounting
// (accounting.cpp) both read it, so "executed FLOPs" count exactly what the kernel computes.
//
// Positions are split into blocks of `block` positions (the last one may be shorter). Query
// block [q.begin, q.end) visits the key blocks intersecting [max(0, q.begin - window + 1),
// q.end): full causal attention (window <= 0) skips every tile above the diagonal, a sliding
// window also every tile left of its band, so S layers cost O(T * window), not O(T^2).
#include <algorithm>
#include <cstdint>

namespace hlp::model {

// Positions per tile side (default). Chosen by measurement (bench/attention, README.md): a
// 128 x 128 fp32 tile is 64 KiB, so a tile's scores, probabilities and their gradient stay in
// L2, while the tile products are large enough for OpenBLAS to run near its peak.
inline constexpr int64_t kAttentionBlock = 128;

struct PositionRange {
  int64_t begin = 0, end = 0;  // [begin, end)
};

// Keys that some query in [q.begin, q.end) may attend to. window <= 0: full causal.
inline PositionRange visible_keys(PositionRange q, int64_t window) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, q.begin - window + 1) : 0;
  return {first, q.end};
}

// True when every query of tile rows `q` sees every key of tile columns `k` (no mask needed):
// the newest key is not after the oldest query, and the oldest key is inside the newest
// query's window.
inline bool tile_fully_visible(PositionRange q, PositionRange k, int64_t window) {
  const bool causal_ok = k.end - 1 <= q.begin;
  const bool window_ok = window <= 0 || (q.end - 1) - k.begin < window;
  return causal_ok && window_ok;
}

// Block indices [begin, end) of the key blocks query block `q` visits.
inline PositionRange visited_key_blocks(PositionRange q, int64_t window, int64_t block) {
  const PositionRange keys = visible_keys(q, window);
  return {keys.begin / block, (keys.end - 1) / block + 1};
}

// Score entries (query x key pairs, masked ones included) the kernel computes per batch row
// and query head in one forward pass. The naive kernel computes seq_len^2.
inline int64_t visited_score_entries(int64_t seq_len, int64_t window,
                                     int64_t block = kAttentionBlock) {
  int64_t entries = 0;
  for (int64_t q_begin = 0; q_begin < seq_len; q_begin += block) {
    const PositionRange q{q_begin, std::min(seq_len, q_begin + block)};
    const PositionRange blocks = visited_key_blocks(q, window, block);
    for (int64_t kb = blocks.begin; kb < blocks.end; ++kb) {
      const int64_t k_len = std::min(seq_len, (kb + 1) * block) - kb * block;
      entries += (q.end - q.begin) * k_len;
    }
  }
  return entries;
}

}  // namespace hlp::model
