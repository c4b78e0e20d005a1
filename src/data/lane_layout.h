#pragma once
// How the corpus is laid out into the G = global_batch lanes of the stream (see README.md):
//
//   corpus bytes [0, S)  ─ nominal lane j: [floor(j*S/G), floor((j+1)*S/G))
//   lane j really starts at its first "cut" (Corpus::find_cut) and ends where lane j+1 starts,
//   so lanes are disjoint, cover the corpus and begin on document (or at least line) boundaries.
//   Each lane is cut the same way into blocks of ~block_bytes; every epoch a lane visits its
//   blocks in an order drawn from (seed, lane, epoch) and reads the documents of each block in
//   file order. Row j of global batch k is the k-th packed sequence of lane j.
//
// Everything here is a function of (corpus, G, seed, block size) only — never of the rank layout.
#include <cstdint>
#include <vector>

#include "data/corpus.h"

namespace hlp::data {

struct Lane {
  int index = 0;
  uint64_t begin = 0;  // global offsets, [begin, end)
  uint64_t end = 0;
  std::vector<uint64_t> block_begin;  // block b = [block_begin[b], block_begin[b+1] or end)
  uint64_t block_end(size_t b) const {
    return b + 1 < block_begin.size() ? block_begin[b + 1] : end;
  }
};

// Nominal shuffle block size when the user gives none: S/G/16 clamped to [64 KiB, 1 MiB].
uint64_t default_block_bytes(uint64_t corpus_bytes, int global_batch);

// Builds lanes [first_lane, last_lane) of a G-lane layout (with their blocks). Every caller
// checks that ALL G lanes hold data (each reads only the first bytes of every lane to find its
// start) so that every rank fails alike. Throws hlp::UserError when a lane is empty.
std::vector<Lane> build_lanes(const Corpus& corpus, int global_batch, uint64_t block_bytes,
                              int first_lane, int last_lane);

// The order in which lane `lane` visits its `n_blocks` blocks in `epoch`: a permutation drawn
// from (seed, lane, epoch) with splitmix64 + Fisher-Yates (same on every platform).
std::vector<uint32_t> block_order(uint64_t seed, int lane, int64_t epoch, size_t n_blocks);

}  // namespace hlp::data
