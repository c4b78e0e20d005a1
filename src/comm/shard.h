#pragma once
// The one sharding rule for flat buffers, shared by reduce_scatter / all_gather and FSDP.
//
// A flat buffer of N elements split over n ranks:
//   shard = ceil(N / n)                      (every rank's shard has this many slots)
//   padded buffer = N elements + (n*shard - N) zeros at the end
//   rank r owns elements [r*shard, min((r+1)*shard, N))   (clamped to N: may be short or empty)
// Example: N = 10, n = 4 -> shard 3; ranks own [0,3) [3,6) [6,9) [9,10); rank 3 has 2 pad slots.
// Example: N = 2,  n = 4 -> shard 1; ranks own [0,1) [1,2) [2,2) [2,2); ranks 2 and 3 own nothing.
// No LibTorch or MPI here, so data/metrics/FSDP code can use it cheaply.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hlp::comm {

struct ShardRange {
  int64_t begin = 0;  // first owned element of the unpadded buffer
  int64_t end = 0;    // one past the last owned element (begin <= end <= N)
  int64_t size() const { return end - begin; }
};

// Slots per rank: ceil(numel / world_size).
inline int64_t shard_numel(int64_t numel, int world_size) {
  if (numel < 0 || world_size < 1)
    throw std::invalid_argument("shard_numel: need numel >= 0 and world_size >= 1 (got numel " +
                                std::to_string(numel) + ", world_size " +
                                std::to_string(world_size) + ")");
  return (numel + world_size - 1) / world_size;
}

// Elements of the padded buffer: world_size * shard_numel(numel, world_size).
inline int64_t padded_numel(int64_t numel, int world_size) {
  return shard_numel(numel, world_size) * world_size;
}

// The elements of the unpadded buffer that `rank` owns.
inline ShardRange shard_range(int64_t numel, int world_size, int rank) {
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("shard_range: rank " + std::to_string(rank) +
                                " outside [0, " + std::to_string(world_size) + ")");
  const int64_t shard = shard_numel(numel, world_size);
  ShardRange range;
  range.begin = std::min<int64_t>(rank * shard, numel);
  range.end = std::min<int64_t>((rank + 1) * shard, numel);
  return range;
}

}  // namespace hlp::comm
