#pragma once
// What the all-to-all context-parallel schemes need of a model's heads (no LibTorch: the
// strategy registry checks runs with it).
#include <cstdint>
#include <numeric>

namespace hlp::model {

// Attention re-sharded to heads over `ranks` (the alltoall scheme) gives rank r query heads
// [r H / ranks, (r + 1) H / ranks) and needs their KV heads there. Fewer KV heads than ranks
// (GQA) are repeated f = ranks / gcd(KV, ranks) times each (repeat_interleave on the head axis,
// as naive attention expands them) so that KV f divides over the ranks; a rank's query heads
// then use exactly its KV heads, because f divides the group H / KV whenever the ranks divide H
// (with g = gcd(KV, ranks): ranks / g divides (KV / g) (H / KV), and is prime to KV / g).
// Returns that f (1: none repeated), or 0 when the query heads do not divide over the ranks.
inline int64_t attention_kv_repeat(int64_t heads, int64_t kv_heads, int64_t ranks) {
  if (kv_heads <= 0 || heads % kv_heads != 0 || heads % ranks != 0) return 0;
  return ranks / std::gcd(kv_heads, ranks);
}

}  // namespace hlp::model
