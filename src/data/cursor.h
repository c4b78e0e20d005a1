#pragma once
// The loader's resumable state: which step comes next and, for each lane, where its next
// unconsumed token lies. Small (one entry per lane) and serialised as one line of JSON, e.g.
//   {"version":1,"step":120,"global_batch":8,"seq_len":256,"seed":1,"corpus_bytes":1201500,
//    "block_bytes":65536,"tokenizer":"byte",
//    "lanes":[{"lane":0,"epoch":0,"block":3,"offset":81920,"skip":17},...]}
// A rank's cursor holds its own lanes; merge() the cursors of all dp ranks into one that any
// rank layout can resume from (a lane missing from a cursor is replayed from the start).
#include <cstdint>
#include <map>
#include <string>

namespace hlp::data {

// Position of a lane's token stream: the chunk start (epoch, index into that epoch's block
// order, global byte offset of a document start) plus the tokens from there already consumed.
struct LanePosition {
  int64_t epoch = 0;
  int64_t block = 0;
  uint64_t offset = 0;
  int64_t skip_tokens = 0;
  bool operator==(const LanePosition& o) const {
    return epoch == o.epoch && block == o.block && offset == o.offset && skip_tokens == o.skip_tokens;
  }
};

struct Cursor {
  int64_t step = 0;  // index of the next global batch
  int global_batch = 0;
  int seq_len = 0;
  uint64_t seed = 0;
  uint64_t corpus_bytes = 0;
  uint64_t block_bytes = 0;  // the shuffle block size in force (resolved, never 0)
  std::string tokenizer;
  std::map<int, LanePosition> lanes;  // lane index → position

  std::string serialize() const;
  // Throws hlp::UserError naming what is wrong when `text` is not a cursor.
  static Cursor parse(const std::string& text);
  // Adds the lanes of `other` (same step and stream parameters, else hlp::UserError).
  void merge(const Cursor& other);
};

}  // namespace hlp::data
