// Byte-level BPE from a Hugging Face tokenizer.json (Qwen2 / Qwen2.5 / Qwen3, GPT-2) behind the
// Tokenizer interface. encode(text), as Hugging Face's tokenizer(text, add_special_tokens=False):
//
//   raw text ──split on added tokens (leftmost-longest; each → its id)──▶ segments
//   segment ──NFC──▶ ──Split(regex, Isolated)──▶ words ──bytes──▶ BPE by merge rank ──▶ ids
//
// A word's ids depend on the word alone, so each loader thread memoizes word → ids (WordCache)
// and every thread count gives the same ids. What a tokenizer.json may contain is checked in
// hf_tokenizer_json.cpp.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "common/error.h"
#include "data/hf_tokenizer_json.h"
#include "data/tokenizer.h"
#include "data/unicode_text.h"
#include "data/utf8.h"

namespace hlp::data {
namespace {

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

// (left id, right id) → (rank, merged id), open addressing; ~150 k merges in 4 MiB.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;

  explicit MergeTable(const std::vector<HfBpeSpec::Merge>& merges) {
    size_t capacity = 1024;
    while (capacity < merges.size() * 2) capacity *= 2;
    slots_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& m = merges[rank];
      Entry& e = probe(key(m.left, m.right));
      if (e.key == kEmpty) e = Entry{key(m.left, m.right), int32_t(rank), m.merged};  // first rank wins
    }
  }
  // nullptr when the pair is not a merge.
  const Entry* find(int32_t left, int32_t right) const {
    const Entry& e = const_cast<MergeTable*>(this)->probe(key(left, right));
    return e.key == kEmpty ? nullptr : &e;
  }

 private:
  static uint64_t key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  Entry& probe(uint64_t k) {
    size_t i = size_t((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    return slots_[i];
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

// One thread's memo of word bytes → ids. Bounded: when full it starts over (the ids of a word
// never depend on what the cache holds, so this only costs time).
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;
  WordCache() : slots_(kSlots) {}

  // Appends the cached ids of `word` to `ids`; false when it is not cached.
  bool append(std::string_view word, uint64_t hash, std::vector<int32_t>& ids) const {
    for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == hash && s.key_len == word.size() &&
          std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
        ids.insert(ids.end(), values_.begin() + s.value_off, values_.begin() + s.value_off + s.value_len);
        return true;
      }
    }
  }
  void insert(std::string_view word, uint64_t hash, const int32_t* first, size_t count) {
    if (entries_ >= kSlots / 2) clear();
    size_t i = hash & (kSlots - 1);
    while (slots_[i].key_len != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = Slot{hash, uint32_t(keys_.size()), uint32_t(word.size()), uint32_t(values_.size()),
                     uint32_t(count)};
    keys_.append(word);
    values_.insert(values_.end(), first, first + count);
    ++entries_;
  }
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    values_.clear();
    entries_ = 0;
  }

 private:
  static constexpr size_t kSlots = 1 << 17;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0, value_off = 0, value_len = 0;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> values_;
  size_t entries_ = 0;
};

std::atomic<uint64_t> next_tokenizer_serial{1};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const std::string& path)
      : path_(path), spec_(load_hf_bpe_spec(path)), splitter_(spec_.split_regex),
        merges_(spec_.merges), serial_(next_tokenizer_serial++) {
    std::copy(spec_.byte_ids, spec_.byte_ids + 256, byte_id_);
    // id → bytes, for decode: every character of a vocab token is one byte in GPT-2's alphabet.
    id_bytes_.resize(size_t(spec_.vocab_size));
    for (size_t id = 0; id < spec_.vocab.size(); ++id) id_bytes_[id] = token_bytes(spec_.vocab[id]);
    if (spec_.ignore_merges)
      for (size_t id = 0; id < spec_.vocab.size(); ++id)
        if (!spec_.vocab[id].empty()) word_id_[id_bytes_[id]] = int32_t(id);
    for (const auto& t : spec_.added_tokens) {
      id_bytes_[size_t(t.id)] = t.content;
      (t.normalized ? normalized_added_ : raw_added_).push_back(t);
    }
    // Longest first, so that the first token matching at a position is the longest one.
    for (auto* list : {&raw_added_, &normalized_added_})
      std::stable_sort(list->begin(), list->end(),
                       [](const auto& a, const auto& b) { return a.content.size() > b.content.size(); });
    for (const auto& t : raw_added_) raw_first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    for (const auto& t : normalized_added_) normalized_first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(spec_.content_hash));
    name_ = "hf-bpe:" + spec_.file_name + "#" + hex;
  }

  void encode(std::string_view text, std::vector<int32_t>& ids) const override {
    try {
      encode_text(text, ids);
    } catch (const UserError& e) {  // the file's regex backtracked catastrophically on `text`
      throw user_error("--tokenizer '", path_, "': ", e.what());
    }
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string bytes;
    for (int32_t id : ids)
      if (id >= 0 && id < spec_.vocab_size) bytes += id_bytes_[size_t(id)];
    return repair_utf8(bytes);  // a cut inside a character decodes to U+FFFD, as in Hugging Face
  }

  int vocab_size() const override { return spec_.vocab_size; }
  int eot_id() const override { return spec_.eot_id; }
  std::string name() const override { return name_; }

 private:
  using AddedList = std::vector<HfAddedToken>;

  void encode_text(std::string_view text, std::vector<int32_t>& ids) const {
    std::string repaired;
    if (!is_valid_utf8(text)) text = repaired = repair_utf8(text);
    WordCache& cache = thread_cache();
    split_added(text, raw_added_, raw_first_byte_, ids, [&](std::string_view segment) {
      std::string storage;
      const std::string_view normal = spec_.nfc ? to_nfc(segment, storage) : segment;
      split_added(normal, normalized_added_, normalized_first_byte_, ids, [&](std::string_view part) {
        splitter_.split(part, [&](size_t start, size_t length) {
          encode_word(part.substr(start, length), cache, ids);
        });
      });
    });
  }

  // The bytes a vocab token spells: each of its characters is one byte in GPT-2's alphabet
  // (code points below 324). A token with any other character stands for its own UTF-8.
  static std::string token_bytes(const std::string& token) {
    static const std::vector<int> byte_of_code_point = [] {
      std::vector<int> table(512, -1);
      for (int b = 0; b < 256; ++b) {
        const std::string& c = byte_to_unicode()[size_t(b)];
        const int cp = c.size() == 1 ? static_cast<unsigned char>(c[0])
                                     : ((static_cast<unsigned char>(c[0]) & 0x1F) << 6) | (static_cast<unsigned char>(c[1]) & 0x3F);
        table[size_t(cp)] = b;
      }
      return table;
    }();
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const auto c0 = static_cast<unsigned char>(token[i]);
      int cp = -1;
      if (c0 < 0x80) {
        cp = c0;
        i += 1;
      } else if (c0 >= 0xC0 && c0 < 0xE0 && i + 1 < token.size()) {
        cp = ((c0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
        i += 2;
      }
      const int b = cp >= 0 && cp < 512 ? byte_of_code_point[size_t(cp)] : -1;
      if (b < 0) return token;
      bytes += static_cast<char>(b);
    }
    return bytes;
  }

  // Calls between(segment) for the text between occurrences of the added tokens of `list`
  // (leftmost, longest at a position) and appends each occurrence's id.
  template <typename F>
  static void split_added(std::string_view text, const AddedList& list, const bool* first_byte,
                          std::vector<int32_t>& ids, F&& between) {
    size_t segment_start = 0;
    if (!list.empty()) {
      for (size_t i = 0; i < text.size(); ++i) {
        if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
        for (const auto& t : list) {
          if (text.compare(i, t.content.size(), t.content) != 0) continue;
          if (i > segment_start) between(text.substr(segment_start, i - segment_start));
          ids.push_back(t.id);
          segment_start = i + t.content.size();
          i = segment_start - 1;
          break;
        }
      }
    }
    if (segment_start < text.size()) between(text.substr(segment_start));
  }

  WordCache& thread_cache() const {
    thread_local uint64_t owner = 0;
    thread_local WordCache cache;
    if (owner != serial_) {
      cache.clear();
      owner = serial_;
    }
    return cache;
  }

  void encode_word(std::string_view word, WordCache& cache, std::vector<int32_t>& ids) const {
    if (word.size() == 1) {
      ids.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
      return;
    }
    if (word.size() > WordCache::kMaxWordBytes) {
      bpe(word, ids);
      return;
    }
    const uint64_t hash = hash_bytes(word);
    if (cache.append(word, hash, ids)) return;
    const size_t before = ids.size();
    bpe(word, ids);
    cache.insert(word, hash, ids.data() + before, ids.size() - before);
  }

  // Appends the BPE of one pre-tokenized word: start from its bytes, merge the adjacent pair of
  // lowest rank (leftmost among equals) until no adjacent pair is a merge.
  void bpe(std::string_view word, std::vector<int32_t>& ids) const {
    if (spec_.ignore_merges) {
      auto it = word_id_.find(std::string(word));
      if (it != word_id_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    if (word.size() <= 64) bpe_short(word, ids); else bpe_long(word, ids);
  }

  // Short words: a scan for the best pair per merge, pair ranks kept beside the symbols.
  void bpe_short(std::string_view word, std::vector<int32_t>& ids) const {
    int32_t sym[64], rank[64];  // rank[i]: rank of (sym[i], sym[i+1]), INT_MAX if no merge
    size_t m = word.size();
    for (size_t i = 0; i < m; ++i) sym[i] = byte_id_[static_cast<unsigned char>(word[i])];
    auto pair_rank = [&](size_t i) {
      const auto* e = merges_.find(sym[i], sym[i + 1]);
      return e ? e->rank : INT_MAX;
    };
    for (size_t i = 0; i + 1 < m; ++i) rank[i] = pair_rank(i);
    while (m > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < m; ++i)
        if (rank[i] < rank[best]) best = i;
      if (rank[best] == INT_MAX) break;
      sym[best] = merges_.find(sym[best], sym[best + 1])->merged;
      std::memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof(int32_t));
      if (m >= best + 3) std::memmove(rank + best + 1, rank + best + 2, (m - best - 3) * sizeof(int32_t));
      --m;
      if (best + 1 < m) rank[best] = pair_rank(best);
      if (best > 0) rank[best - 1] = pair_rank(best - 1);
    }
    ids.insert(ids.end(), sym, sym + m);
  }

  // Long words (runs of letters or symbols): a linked list and a min-heap of (rank, position);
  // stale heap entries are recognised by their ids no longer being neighbours.
  void bpe_long(std::string_view word, std::vector<int32_t>& ids) const {
    const int32_t n = int32_t(word.size());
    std::vector<int32_t> sym(static_cast<size_t>(n)), next(sym.size()), prev(sym.size());
    for (int32_t i = 0; i < n; ++i) {
      sym[size_t(i)] = byte_id_[static_cast<unsigned char>(word[size_t(i)])];
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
      prev[size_t(i)] = i - 1;
    }
    struct Candidate {
      int32_t rank, pos, left, right;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto consider = [&](int32_t pos) {
      const int32_t nx = next[size_t(pos)];
      if (nx < 0) return;
      if (const auto* e = merges_.find(sym[size_t(pos)], sym[size_t(nx)]))
        heap.push({e->rank, pos, sym[size_t(pos)], sym[size_t(nx)]});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int32_t nx = next[size_t(c.pos)];
      if (sym[size_t(c.pos)] != c.left || nx < 0 || sym[size_t(nx)] != c.right) continue;
      sym[size_t(c.pos)] = merges_.find(c.left, c.right)->merged;
      sym[size_t(nx)] = -1;
      next[size_t(c.pos)] = next[size_t(nx)];
      if (next[size_t(nx)] >= 0) prev[size_t(next[size_t(nx)])] = c.pos;
      if (prev[size_t(c.pos)] >= 0) consider(prev[size_t(c.pos)]);
      consider(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = next[size_t(i)]) ids.push_back(sym[size_t(i)]);
  }

  std::string path_;  // as given to --tokenizer, for messages
  HfBpeSpec spec_;
  RegexSplitter splitter_;
  MergeTable merges_;
  uint64_t serial_;  // tells this tokenizer's per-thread caches from another's
  int32_t byte_id_[256] = {};
  std::vector<std::string> id_bytes_;
  std::unordered_map<std::string, int32_t> word_id_;  // ignore_merges: word bytes → id
  AddedList raw_added_, normalized_added_;
  bool raw_first_byte_[256] = {}, normalized_first_byte_[256] = {};
  std::string name_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<BpeTokenizer>(tokenizer_json_path);
}

}  // namespace hlp::data
