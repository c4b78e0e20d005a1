#include "data/loader.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "common/clock.h"
#include "common/error.h"
#include "data/document_reader.h"
#include "data/lane_layout.h"
#include "data/utf8.h"

namespace hlp::data {

// A run of whole documents of one lane, tokenized: the unit workers produce and next() packs.
struct Chunk {
  LanePosition start;            // where its reading began (skip_tokens = 0)
  std::vector<int32_t> tokens;   // documents, each followed by end-of-text
};

struct Loader::LaneState {
  LaneState(const Corpus& corpus, size_t max_document_bytes) : reader(corpus, max_document_bytes) {}
  Lane lane;
  // Reader side: touched only by the worker that holds `reading`.
  DocumentReader reader;
  int64_t epoch = 0;
  int64_t block = 0;                 // index into `order`
  std::vector<uint32_t> order;       // block order of `epoch`
  // Shared, under Loader::mu_.
  bool reading = false;
  int64_t next_read_seq = 0, next_take_seq = 0;
  std::map<int64_t, Chunk> ready;    // tokenized chunks by read sequence number
  // Consumer side (the thread calling next()).
  Chunk current;
  size_t current_pos = 0;
  LanePosition base;                 // cursor: start of `current` + tokens consumed from it
  int64_t pending_skip = 0;          // tokens still to drop after a resume
  int64_t first_epoch_seen = -1, last_epoch_seen = -1, tokens_in_epoch = 0;
};

namespace {

// Moves the lane's reader to block `block` of `epoch` (drawing that epoch's order if needed).
void seek_block(Loader::LaneState& s, uint64_t seed, int64_t epoch, int64_t block,
                uint64_t offset) {
  if (s.order.empty() || epoch != s.epoch)
    s.order = block_order(seed, s.lane.index, epoch, s.lane.block_begin.size());
  s.epoch = epoch;
  s.block = block;
  s.reader.seek(offset, s.lane.block_end(s.order[static_cast<size_t>(block)]));
}

void next_block(Loader::LaneState& s, uint64_t seed) {
  int64_t epoch = s.epoch, block = s.block + 1;
  if (block == static_cast<int64_t>(s.lane.block_begin.size())) {
    ++epoch;
    block = 0;
  }
  if (epoch != s.epoch) {
    s.order = block_order(seed, s.lane.index, epoch, s.lane.block_begin.size());
    s.epoch = epoch;
  }
  seek_block(s, seed, epoch, block, s.lane.block_begin[s.order[static_cast<size_t>(block)]]);
}

// Reads whole documents from the lane until chunk_bytes are gathered or its block ends.
std::vector<RawDocument> read_raw_chunk(Loader::LaneState& s, const DataOptions& o,
                                        LanePosition* start) {
  std::vector<RawDocument> docs;
  size_t bytes = 0;
  size_t empty_blocks = 0;
  *start = LanePosition{s.epoch, s.block, s.reader.position(), 0};
  while (bytes < o.chunk_bytes) {
    RawDocument doc;
    if (!s.reader.next(&doc)) {
      next_block(s, o.seed);
      if (!docs.empty()) break;
      if (++empty_blocks > s.lane.block_begin.size())
        throw user_error("--data '", o.path, "': lane ", s.lane.index, " (bytes ", s.lane.begin,
                         "..", s.lane.end, ") holds no document, only blank lines; use a "
                         "smaller --global-batch or more data");
      *start = LanePosition{s.epoch, s.block, s.reader.position(), 0};
      continue;
    }
    bytes += doc.bytes.size() + 1;
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace

Loader::Loader(const DataOptions& options, int dp_rank, int dp_size)
    : Loader(options, dp_rank, dp_size, Cursor{}) {}

Loader::Loader(const DataOptions& options, int dp_rank, int dp_size, const Cursor& resume_from)
    : options_(options), dp_rank_(dp_rank), dp_size_(dp_size) {
  const auto& o = options_;
  if (o.seq_len < 1) throw user_error("--seq-len must be >= 1 (got ", o.seq_len, ")");
  if (o.global_batch < 1) throw user_error("--global-batch must be >= 1 (got ", o.global_batch, ")");
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
    throw user_error("data-parallel rank ", dp_rank, " of ", dp_size, " is not a valid rank");
  if (o.global_batch % dp_size != 0)
    throw user_error("--global-batch ", o.global_batch, " is not divisible by the data-parallel "
                     "size ", dp_size, "; use a multiple of ", dp_size);
  if (o.loader_threads < 1)
    throw user_error("--loader-threads must be >= 1 (got ", o.loader_threads, ")");
  if (o.queue_depth < 1) throw user_error("loader queue depth must be >= 1 (got ", o.queue_depth, ")");
  if (o.chunk_bytes < 1) throw user_error("loader chunk_bytes must be >= 1");
  corpus_ = Corpus::open(o.path);
  tokenizer_ = make_tokenizer(o.tokenizer);
  const int per_rank = o.global_batch / dp_size;
  first_lane_ = dp_rank * per_rank;
  block_bytes_ = o.shuffle_block_bytes ? o.shuffle_block_bytes
                                       : default_block_bytes(corpus_.size_bytes(), o.global_batch);
  for (auto& lane : build_lanes(corpus_, o.global_batch, block_bytes_, first_lane_, first_lane_ + per_rank)) {
    auto s = std::make_unique<LaneState>(corpus_, o.max_document_bytes);
    s->lane = std::move(lane);
    lanes_.push_back(std::move(s));
  }
  start(resume_from.global_batch ? &resume_from : nullptr);
}

void Loader::start(const Cursor* resume) {
  const auto& o = options_;
  if (resume) {
    const Cursor& c = *resume;
    if (c.global_batch != o.global_batch || c.seq_len != o.seq_len || c.seed != o.seed ||
        c.corpus_bytes != corpus_.size_bytes() || c.block_bytes != block_bytes_ ||
        c.tokenizer != tokenizer_->name())
      throw user_error("data cursor was made for another stream (global_batch ", c.global_batch,
                       ", seq_len ", c.seq_len, ", seed ", c.seed, ", corpus ", c.corpus_bytes,
                       " bytes, block ", c.block_bytes, " bytes, tokenizer ", c.tokenizer,
                       ") than this run (", o.global_batch, ", ", o.seq_len, ", ", o.seed, ", ",
                       corpus_.size_bytes(), " bytes, block ", block_bytes_, " bytes, ",
                       tokenizer_->name(), ")");
    step_ = c.step;
  }
  const int64_t cols = o.seq_len + 1;
  for (auto& sp : lanes_) {
    LaneState& s = *sp;
    const size_t n_blocks = s.lane.block_begin.size();
    LanePosition p;
    auto found = resume ? resume->lanes.find(s.lane.index) : std::map<int, LanePosition>::const_iterator{};
    if (resume && found != resume->lanes.end()) {
      p = found->second;
      if (p.epoch < 0 || p.block < 0 || p.block >= static_cast<int64_t>(n_blocks) || p.skip_tokens < 0)
        throw user_error("data cursor lane ", s.lane.index, " does not fit this corpus");
      const auto order = block_order(o.seed, s.lane.index, p.epoch, n_blocks);
      const uint32_t b = order[static_cast<size_t>(p.block)];
      if (p.offset < s.lane.block_begin[b] || p.offset > s.lane.block_end(b))
        throw user_error("data cursor lane ", s.lane.index, " offset ", p.offset,
                         " lies outside its block; was the corpus changed?");
    } else {
      // No saved position (fresh start, or a cursor of another rank layout): replay the lane.
      p.epoch = 0;
      p.block = 0;
      p.offset = s.lane.block_begin[block_order(o.seed, s.lane.index, 0, n_blocks)[0]];
      p.skip_tokens = step_ * cols;
    }
    seek_block(s, o.seed, p.epoch, p.block, p.offset);
    s.base = p;
    s.base.skip_tokens = 0;
    s.pending_skip = p.skip_tokens;
  }
  for (int t = 0; t < o.loader_threads; ++t) workers_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int Loader::pick_lane_locked() const {
  int best = -1;
  int64_t best_in_flight = options_.queue_depth;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const LaneState& s = *lanes_[i];
    const int64_t in_flight = s.next_read_seq - s.next_take_seq;
    if (!s.reading && in_flight < best_in_flight) {
      best = static_cast<int>(i);
      best_in_flight = in_flight;
    }
  }
  return best;
}

void Loader::report_problem(size_t file, uint64_t offset, const std::string& why) {
  std::lock_guard<std::mutex> lk(report_mu_);
  if (reported_ >= options_.max_reported_problems) return;
  ++reported_;
  const auto& path = corpus_.files()[file].path;
  std::fprintf(stderr, "hlp data: %s:%lld: %s%s\n", path.c_str(),
               static_cast<long long>(corpus_.line_number(file, offset)), why.c_str(),
               reported_ == options_.max_reported_problems ? " (further problems only counted)" : "");
}

void Loader::worker_loop() {
  const auto& o = options_;
  const int32_t eot = tokenizer_->eot_id();
  double cpu_reported_s = thread_cpu_s();  // this thread's CPU time already in the stats
  while (true) {
    const double cpu_s = thread_cpu_s();
    stats_.worker_cpu_ns += int64_t((cpu_s - cpu_reported_s) * 1e9);
    cpu_reported_s = cpu_s;
    std::unique_lock<std::mutex> lk(mu_);
    work_cv_.wait(lk, [&] { return stop_ || (!error_ && pick_lane_locked() >= 0); });
    if (stop_) return;
    LaneState& s = *lanes_[static_cast<size_t>(pick_lane_locked())];
    s.reading = true;
    const int64_t seq = s.next_read_seq++;
    int64_t in_flight = 0;
    for (const auto& lane : lanes_) in_flight += lane->next_read_seq - lane->next_take_seq;
    peak_chunks_in_flight_ = std::max(peak_chunks_in_flight_, in_flight);
    lk.unlock();

    Chunk chunk;
    try {
      // Reading is sequential per lane (the `reading` flag), so chunk `seq` follows `seq - 1`.
      std::vector<RawDocument> docs;
      try {
        docs = read_raw_chunk(s, o, &chunk.start);
      } catch (...) {
        std::lock_guard<std::mutex> relock(mu_);
        s.reading = false;
        throw;
      }
      {
        std::lock_guard<std::mutex> relock(mu_);
        s.reading = false;
      }
      work_cv_.notify_all();
      // Tokenize outside the lock: this is where the threads run in parallel.
      for (RawDocument& doc : docs) {
        std::string_view text;
        std::string owned;
        if (doc.too_long) {
          ++stats_.malformed_lines;
          report_problem(doc.file, doc.offset, "skipped line: longer than max_document_bytes (" +
                                                   std::to_string(o.max_document_bytes) + ")");
          continue;
        }
        int replaced = 0;
        owned = repair_utf8(doc.bytes, &replaced);
        if (replaced > 0) {
          ++stats_.invalid_utf8_documents;
          report_problem(doc.file, doc.offset, "invalid UTF-8 (" + std::to_string(replaced) +
                                                   " sequences) replaced by U+FFFD");
        }
        if (doc.format == FileFormat::kJsonl) {
          std::string field_text, why;
          if (!jsonl_text(owned, o.jsonl_field, &field_text, &why)) {
            ++stats_.malformed_lines;
            report_problem(doc.file, doc.offset, "skipped malformed line: " + why);
            continue;
          }
          owned = std::move(field_text);
          if (owned.empty()) {
            ++stats_.empty_documents;
            continue;
          }
        } else if (doc.cut) {
          ++stats_.split_documents;
        }
        text = owned;
        const size_t before = chunk.tokens.size();
        tokenizer_->encode(text, chunk.tokens);
        chunk.tokens.push_back(eot);
        ++stats_.documents;
        stats_.tokens += static_cast<int64_t>(chunk.tokens.size() - before);
      }
    } catch (...) {
      std::lock_guard<std::mutex> relock(mu_);
      if (!error_) error_ = std::current_exception();
      ready_cv_.notify_all();
      return;
    }
    lk.lock();
    s.ready.emplace(seq, std::move(chunk));
    lk.unlock();
    ready_cv_.notify_all();
  }
}

void Loader::take_chunk(LaneState& s, double* waited_s) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] { return error_ || s.ready.count(s.next_take_seq) > 0; };
    if (!ready()) {
      const double t0 = now_s();
      ready_cv_.wait(lk, ready);
      *waited_s += now_s() - t0;
    }
    if (error_) std::rethrow_exception(error_);
    auto it = s.ready.find(s.next_take_seq);
    s.current = std::move(it->second);
    s.ready.erase(it);
    ++s.next_take_seq;
  }
  work_cv_.notify_all();
  s.current_pos = 0;
  s.base = s.current.start;
  // A lane whose whole epoch yields no token (every line malformed) would loop forever.
  const int64_t epoch = s.current.start.epoch;
  if (s.first_epoch_seen < 0) s.first_epoch_seen = epoch;
  if (epoch != s.last_epoch_seen) {
    if (s.last_epoch_seen > s.first_epoch_seen && s.tokens_in_epoch == 0)
      throw user_error("--data '", options_.path, "': lane ", s.lane.index, " (bytes ",
                       s.lane.begin, "..", s.lane.end, ") has no usable document in a whole "
                       "epoch (all lines malformed or empty); fix the data or use a smaller "
                       "--global-batch");
    s.last_epoch_seen = epoch;
    s.tokens_in_epoch = 0;
  }
  s.tokens_in_epoch += static_cast<int64_t>(s.current.tokens.size());
  // After a resume, drop the tokens the original run had already consumed.
  const int64_t drop = std::min<int64_t>(s.pending_skip, static_cast<int64_t>(s.current.tokens.size()));
  s.current_pos = static_cast<size_t>(drop);
  s.base.skip_tokens = drop;
  s.pending_skip -= drop;
}

Batch Loader::next() {
  Batch b;
  b.step = step_;
  b.rows = static_cast<int>(lanes_.size());
  b.cols = options_.seq_len + 1;
  b.tokens.resize(static_cast<size_t>(b.rows) * b.cols);
  b.global_rows.resize(b.rows);
  double waited_s = 0;
  for (int r = 0; r < b.rows; ++r) {
    LaneState& s = *lanes_[r];
    int64_t* out = b.tokens.data() + static_cast<size_t>(r) * b.cols;
    int filled = 0;
    while (filled < b.cols) {
      if (s.current_pos >= s.current.tokens.size() || s.pending_skip > 0) {
        take_chunk(s, &waited_s);
        continue;
      }
      const size_t n = std::min<size_t>(b.cols - filled, s.current.tokens.size() - s.current_pos);
      std::copy_n(s.current.tokens.data() + s.current_pos, n, out + filled);
      s.current_pos += n;
      s.base.skip_tokens += static_cast<int64_t>(n);
      filled += static_cast<int>(n);
    }
    b.global_rows[r] = s.lane.index;
  }
  ++step_;
  last_wait_s_ = waited_s;
  total_wait_s_ += waited_s;
  return b;
}

Cursor Loader::cursor() const {
  Cursor c;
  c.step = step_;
  c.global_batch = options_.global_batch;
  c.seq_len = options_.seq_len;
  c.seed = options_.seed;
  c.corpus_bytes = corpus_.size_bytes();
  c.block_bytes = block_bytes_;
  c.tokenizer = tokenizer_->name();
  for (const auto& s : lanes_) {
    LanePosition p = s->base;
    p.skip_tokens += s->pending_skip;  // not yet dropped after a resume
    c.lanes[s->lane.index] = p;
  }
  return c;
}

std::string Loader::describe() const {
  return "data: " + std::to_string(corpus_.files().size()) + " file(s), " +
         std::to_string(corpus_.size_bytes()) + " bytes, lanes " + std::to_string(first_lane_) +
         ".." + std::to_string(first_lane_ + lanes() - 1) + " of " +
         std::to_string(options_.global_batch) + ", tokenizer " + tokenizer_->name() + " (vocab " +
         std::to_string(vocab_size()) + "), " + std::to_string(options_.loader_threads) +
         " loader thread(s)";
}

LoaderStats Loader::stats() const {
  LoaderStats st;
  st.documents = stats_.documents;
  st.tokens = stats_.tokens;
  st.malformed_lines = stats_.malformed_lines;
  st.empty_documents = stats_.empty_documents;
  st.invalid_utf8_documents = stats_.invalid_utf8_documents;
  st.split_documents = stats_.split_documents;
  st.worker_cpu_s = double(stats_.worker_cpu_ns.load()) * 1e-9;
  std::lock_guard<std::mutex> lk(mu_);
  st.peak_chunks_in_flight = peak_chunks_in_flight_;
  return st;
}

}  // namespace hlp::data
