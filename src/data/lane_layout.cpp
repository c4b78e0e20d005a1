#include "data/lane_layout.h"

#include <algorithm>

#include "common/error.h"

namespace hlp::data {
namespace {

uint64_t nominal_lane_begin(uint64_t corpus_bytes, int global_batch, int lane) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(corpus_bytes) * lane / global_batch);
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Cuts of the nominal blocks of lane j, in order (blocks without a line start are dropped).
// With stop_at_first, returns after the first cut found (enough to know where the lane starts).
std::vector<uint64_t> lane_cuts(const Corpus& corpus, int global_batch, uint64_t block_bytes,
                                int lane, bool stop_at_first) {
  const uint64_t lo = nominal_lane_begin(corpus.size_bytes(), global_batch, lane);
  const uint64_t hi = nominal_lane_begin(corpus.size_bytes(), global_batch, lane + 1);
  std::vector<uint64_t> cuts;
  // floor(len / block_bytes) nominal blocks (at least one); the last one takes the remainder,
  // so no block is so short that it is likely to hold no document boundary.
  const uint64_t n_blocks = std::max<uint64_t>(1, (hi - lo) / block_bytes);
  for (uint64_t k = 0; k < n_blocks; ++k) {
    const uint64_t n = lo + k * block_bytes;
    const uint64_t limit = k + 1 == n_blocks ? hi : n + block_bytes;
    if (auto cut = corpus.find_cut(n, limit)) {
      cuts.push_back(*cut);
      if (stop_at_first) break;
    }
  }
  return cuts;
}

}  // namespace

uint64_t default_block_bytes(uint64_t corpus_bytes, int global_batch) {
  const uint64_t per_lane = corpus_bytes / static_cast<uint64_t>(std::max(global_batch, 1));
  return std::clamp<uint64_t>(per_lane / 16, 64 * 1024, 1024 * 1024);
}

std::vector<Lane> build_lanes(const Corpus& corpus, int global_batch, uint64_t block_bytes,
                              int first_lane, int last_lane) {
  if (block_bytes == 0) block_bytes = default_block_bytes(corpus.size_bytes(), global_batch);
  // Where every lane starts (all ranks compute all G, so an empty lane fails everywhere).
  std::vector<uint64_t> lane_begin(global_batch + 1, corpus.size_bytes());
  for (int j = 0; j < global_batch; ++j) {
    const auto cuts = lane_cuts(corpus, global_batch, block_bytes, j, /*stop_at_first=*/true);
    if (cuts.empty()) {
      const uint64_t lo = nominal_lane_begin(corpus.size_bytes(), global_batch, j);
      const uint64_t hi = nominal_lane_begin(corpus.size_bytes(), global_batch, j + 1);
      throw user_error("--global-batch ", global_batch, " splits the corpus (", corpus.size_bytes(),
                       " bytes) into ", global_batch, " lanes, but lane ", j, " (bytes ", lo, "..",
                       hi, ") holds no line start: the corpus is too small or has a line longer "
                       "than a lane; use a smaller --global-batch or more data");
    }
    lane_begin[j] = cuts.front();
  }
  std::vector<Lane> lanes;
  for (int j = first_lane; j < last_lane; ++j) {
    Lane lane;
    lane.index = j;
    lane.begin = lane_begin[j];
    lane.end = lane_begin[j + 1];
    lane.block_begin = lane_cuts(corpus, global_batch, block_bytes, j, /*stop_at_first=*/false);
    lanes.push_back(std::move(lane));
  }
  return lanes;
}

std::vector<uint32_t> block_order(uint64_t seed, int lane, int64_t epoch, size_t n_blocks) {
  std::vector<uint32_t> order(n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) order[i] = static_cast<uint32_t>(i);
  uint64_t state = seed;
  state ^= splitmix64(state) + static_cast<uint64_t>(lane) * 0xD1B54A32D192ED03ull;
  state ^= splitmix64(state) + static_cast<uint64_t>(epoch) * 0x8CB92BA72F3D8DD7ull;
  for (size_t i = n_blocks; i > 1; --i) {
    const size_t k = static_cast<size_t>(splitmix64(state) % i);
    std::swap(order[i - 1], order[k]);
  }
  return order;
}

}  // namespace hlp::data
