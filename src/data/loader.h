#pragma once
// Loader: this data-parallel rank's rows of each global batch, read lazily and tokenized on the
// fly by N worker threads into a bounded queue (see README.md for the stream layout).
//
//   DataOptions opt; opt.path = "datasets/sample/corpus.txt"; opt.seq_len = 256;
//   opt.global_batch = 8;
//   Loader loader(opt, mesh.dp_index, mesh.dp);       // the loader never sees tp / pp
//   Batch b = loader.next();                           // b.tokens: [G/dp, T+1] int64
//   inputs = b.tokens[:, :T], targets = b.tokens[:, 1:]; data_wait_s = loader.last_wait_s()
//
// Row r of the batch is lane (dp_rank * G/dp + r) of the G-lane stream: the global batch of step
// k is the same for every dp_size, loader_threads and micro-batch split.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/corpus.h"
#include "data/cursor.h"
#include "data/tokenizer.h"

namespace hlp::data {

struct DataOptions {
  std::string path;                   // file, directory or glob of .txt / .jsonl
  std::string tokenizer = "byte";     // "byte", a SentencePiece .model or a tokenizer.json
  std::string jsonl_field = "text";   // the string field of a .jsonl object that holds the text
  int seq_len = 256;                  // T; every row holds T+1 tokens
  int global_batch = 8;               // G sequences per step over all dp ranks
  uint64_t seed = 1234;               // block order of every lane and epoch
  int loader_threads = 2;             // tokenizer worker threads
  int queue_depth = 4;                // tokenized chunks in flight per lane
  size_t chunk_bytes = 64 * 1024;     // raw bytes a worker reads and tokenizes at a time
  uint64_t shuffle_block_bytes = 0;   // 0 = default_block_bytes(corpus, G)
  size_t max_document_bytes = 4u << 20;
  int max_reported_problems = 10;     // stderr lines about skipped/repaired input per loader
};

struct Batch {
  int64_t step = 0;   // global step index k (0-based)
  int rows = 0;       // global_batch / dp_size
  int cols = 0;       // seq_len + 1
  std::vector<int64_t> tokens;       // [rows, cols] row-major
  std::vector<int64_t> global_rows;  // [rows] row index of each row in the global batch (= lane)
  const int64_t* row(int r) const { return tokens.data() + static_cast<size_t>(r) * cols; }
};

struct LoaderStats {
  int64_t documents = 0;               // documents tokenized
  int64_t tokens = 0;                  // tokens produced, end-of-text included
  int64_t malformed_lines = 0;         // .jsonl lines skipped (bad JSON, no/wrong field, too long)
  int64_t empty_documents = 0;         // .jsonl records with an empty text (skipped)
  int64_t invalid_utf8_documents = 0;  // documents whose invalid UTF-8 was replaced by U+FFFD
  int64_t split_documents = 0;         // .txt documents cut at max_document_bytes
  int64_t peak_chunks_in_flight = 0;   // most chunks read but not yet taken, all lanes together
                                       // (bounded by lanes x queue_depth: the memory bound)
  double worker_cpu_s = 0.0;           // CPU seconds the loader threads used (reading,
                                       // tokenizing), counted after each chunk
};

class Loader {
 public:
  // Throws hlp::UserError for bad options (global_batch % dp_size != 0, ...), a bad corpus or
  // tokenizer. A cursor (from cursor() of a loader of the same stream, any rank layout) makes
  // the first next() return batch cursor.step exactly as the original run would have.
  Loader(const DataOptions& options, int dp_rank, int dp_size);
  Loader(const DataOptions& options, int dp_rank, int dp_size, const Cursor& resume_from);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's rows of the next global batch. Blocks until the workers have them; rethrows a
  // worker's error (e.g. hlp::UserError when a lane holds no usable document).
  Batch next();

  double last_wait_s() const { return last_wait_s_; }  // time the last next() blocked on data
  double total_wait_s() const { return total_wait_s_; }
  int vocab_size() const { return tokenizer_->vocab_size(); }
  int eot_id() const { return tokenizer_->eot_id(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const Corpus& corpus() const { return corpus_; }
  const DataOptions& options() const { return options_; }
  int64_t step() const { return step_; }
  int first_lane() const { return first_lane_; }
  int lanes() const { return static_cast<int>(lanes_.size()); }
  Cursor cursor() const;  // state before the next next(); this rank's lanes only
  // One line for logs: "data: 1 file(s), 1201500 bytes, lanes 0..7 of 8, tokenizer byte (vocab 257)".
  std::string describe() const;
  LoaderStats stats() const;

  struct LaneState;  // one lane's reader, queue and packer (loader.cpp)

 private:
  void start(const Cursor* resume_from);
  void worker_loop();
  int pick_lane_locked() const;
  void take_chunk(LaneState& lane, double* waited_s);
  void report_problem(size_t file, uint64_t offset, const std::string& why);

  DataOptions options_;
  int dp_rank_, dp_size_, first_lane_ = 0;
  Corpus corpus_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<LaneState>> lanes_;
  uint64_t block_bytes_ = 0;  // resolved shuffle block size
  int64_t step_ = 0;
  double last_wait_s_ = 0, total_wait_s_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  bool stop_ = false;
  int64_t peak_chunks_in_flight_ = 0;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;

  std::mutex report_mu_;
  int reported_ = 0;
  struct AtomicStats {
    std::atomic<int64_t> documents{0}, tokens{0}, malformed_lines{0}, empty_documents{0},
        invalid_utf8_documents{0}, split_documents{0}, worker_cpu_ns{0};
  } stats_;

  friend struct LaneWorker;
};

}  // namespace hlp::data
