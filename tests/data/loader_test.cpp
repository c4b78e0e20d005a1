// Loader: packing and shifted targets, document boundaries, determinism over threads and dp
// sizes, coverage per epoch, cursor resume, and every bad input.
#include <unistd.h>

#include "catch_compat.h"
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/loader.h"
#include "data_test_util.h"

using namespace hlp::data;
using namespace hlp::data::testing;

namespace {

DataOptions small_options(const std::string& path) {
  DataOptions o;
  o.path = path;
  o.seq_len = 15;
  o.global_batch = 4;
  o.seed = 7;
  o.loader_threads = 2;
  o.queue_depth = 2;
  o.chunk_bytes = 200;          // many chunks, so the reorder logic is exercised
  o.shuffle_block_bytes = 300;  // many blocks, so the epoch shuffle is exercised
  return o;
}

// The rows of `steps` global batches as seen by dp ranks 0..dp-1 glued back together.
std::vector<std::vector<int64_t>> global_batches(const DataOptions& o, int dp, int steps) {
  std::vector<std::vector<int64_t>> out(steps);
  for (int r = 0; r < dp; ++r) {
    Loader loader(o, r, dp);
    for (int s = 0; s < steps; ++s) {
      const Batch b = loader.next();
      REQUIRE(b.step == s);
      REQUIRE(b.rows == o.global_batch / dp);
      for (int i = 0; i < b.rows; ++i) REQUIRE(b.global_rows[i] == r * b.rows + i);
      out[s].insert(out[s].end(), b.tokens.begin(), b.tokens.end());
    }
  }
  return out;
}

// Captures what the code under test writes to stderr.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = dup(2);
    dup2(fileno(file_), 2);
  }
  std::string text() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    std::rewind(file_);
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file_)) > 0) s.append(buf, n);
    return s;
  }
  ~StderrCapture() {
    if (saved_ >= 0) text();
    std::fclose(file_);
  }

 private:
  FILE* file_;
  int saved_ = -1;
};

}  // namespace

TEST_CASE("data: rows are consecutive T+1-token windows of the packed stream, targets = inputs shifted by one", "[data][loader]") {
  TempDir dir;
  const auto docs = numbered_documents(40);
  dir.write("c.txt", join_txt(docs));
  auto o = small_options(dir.path());
  o.global_batch = 1;                 // one lane: the whole corpus in file order
  o.shuffle_block_bytes = 1ull << 30; // one block: epochs repeat the same order
  // The packed stream, computed independently: each document's bytes then <eot>, per epoch.
  std::vector<int64_t> expected;
  while (expected.size() < 200u * 16u)
    for (const auto& d : docs) {
      for (unsigned char c : d) expected.push_back(c);
      expected.push_back(256);
    }
  Loader loader(o, 0, 1);
  for (int k = 0; k < 200; ++k) {  // crosses several epochs
    const Batch b = loader.next();
    REQUIRE(b.rows == 1);
    REQUIRE(b.cols == 16);
    const int64_t* row = b.row(0);
    for (int t = 0; t < 15; ++t) {
      REQUIRE(row[t] == expected[k * 16 + t]);          // input t
      REQUIRE(row[t + 1] == expected[k * 16 + t + 1]);  // target t = the next token
    }
  }
}

TEST_CASE("data: packing puts one end-of-text after every document, never splits or merges them", "[data][loader]") {
  TempDir dir;
  const auto docs = numbered_documents(40);
  dir.write("c.txt", join_txt(docs));
  auto o = small_options(dir.path());
  Loader loader(o, 0, 1);
  const std::set<std::string> all(docs.begin(), docs.end());
  for (const auto& stream : lane_streams(loader, 30)) {
    auto pieces = split_documents(stream, loader.eot_id());
    REQUIRE(pieces.size() > 3);
    for (size_t i = 1; i < pieces.size(); ++i)  // the first may be cut by nothing: lanes start on docs
      REQUIRE(all.count(pieces[i]) == 1);
    REQUIRE(all.count(pieces[0]) == 1);
  }
}

namespace {
std::string jsonl(const std::vector<std::string>& docs, const std::string& field = "text") {
  std::string s;
  for (const auto& d : docs) s += nlohmann::json{{field, d}, {"id", s.size()}}.dump() + "\n";
  return s;
}
}  // namespace

TEST_CASE("data: every document is read once per epoch across all ranks' lanes", "[data][loader][sharding]") {
  TempDir dir;
  const auto docs = numbered_documents(60);
  dir.write("a.txt", join_txt({docs.begin(), docs.begin() + 30}));
  dir.write("b.jsonl", jsonl({docs.begin() + 30, docs.end()}));
  auto o = small_options(dir.path());
  const int dp = 2;
  std::multiset<std::string> epoch0;
  std::set<int64_t> lanes_seen;
  for (int r = 0; r < dp; ++r) {
    Loader loader(o, r, dp);
    int first = loader.first_lane();
    for (const auto& stream : lane_streams(loader, 150)) {
      lanes_seen.insert(first++);
      // Epoch 0 of the lane ends where its first document repeats.
      std::set<std::string> lane_docs;
      for (const auto& d : split_documents(stream, loader.eot_id())) {
        if (lane_docs.count(d)) break;
        lane_docs.insert(d);
      }
      REQUIRE(lane_docs.size() > 2);
      epoch0.insert(lane_docs.begin(), lane_docs.end());
    }
  }
  REQUIRE(lanes_seen == std::set<int64_t>{0, 1, 2, 3});
  REQUIRE_THAT(Loader(o, 1, dp).describe(), Catch::Contains("2 file(s)") && Catch::Contains("lanes 2..3 of 4"));
  // Disjoint (no document twice) and complete (every document once).
  REQUIRE(epoch0 == std::multiset<std::string>(docs.begin(), docs.end()));
}

TEST_CASE("data: the global batch of step k is the same for 1, 2 and 4 dp ranks", "[data][loader][sharding]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(80)));
  auto o = small_options(dir.path());
  const auto one = global_batches(o, 1, 25);
  REQUIRE(global_batches(o, 2, 25) == one);
  REQUIRE(global_batches(o, 4, 25) == one);
  REQUIRE(one[0] != one[1]);
}

TEST_CASE("data: batches are identical for 1, 2 and 4 loader threads", "[data][loader][threads]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(80)));
  auto o = small_options(dir.path());
  std::vector<std::vector<int64_t>> reference;
  for (int threads : {1, 2, 4}) {
    for (int depth : {1, 3}) {
      o.loader_threads = threads;
      o.queue_depth = depth;
      Loader loader(o, 0, 1);
      std::vector<std::vector<int64_t>> got;
      for (int s = 0; s < 40; ++s) got.push_back(loader.next().tokens);
      if (reference.empty()) reference = got;
      REQUIRE(got == reference);
    }
  }
}

TEST_CASE("data: chunks in flight never exceed lanes x queue_depth (the memory bound)", "[data][loader][threads]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(300)));
  auto o = small_options(dir.path());
  o.chunk_bytes = 64;  // many small chunks
  for (int depth : {1, 3}) {
    o.queue_depth = depth;
    o.loader_threads = 4;
    Loader loader(o, 0, 1);
    for (int s = 0; s < 200; ++s) loader.next();
    const auto st = loader.stats();
    REQUIRE(st.peak_chunks_in_flight >= 1);
    REQUIRE(st.peak_chunks_in_flight <= static_cast<int64_t>(loader.lanes()) * depth);
  }
}

TEST_CASE("data: the seed changes the order of blocks, the same seed repeats it", "[data][loader]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(80)));
  auto o = small_options(dir.path());
  const auto a = global_batches(o, 1, 10);
  REQUIRE(global_batches(o, 1, 10) == a);
  o.seed = 8;
  REQUIRE(global_batches(o, 1, 10) != a);
}

TEST_CASE("data: a cursor restores the exact next batch, also in another rank layout", "[data][loader][cursor]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(50)));
  dir.write("d.jsonl", jsonl(numbered_documents(20)));
  auto o = small_options(dir.path());
  const int k = 37, m = 60;  // crosses epochs (lanes hold ~70 steps of tokens)
  // The reference: one uninterrupted 1-rank run.
  Loader ref(o, 0, 1);
  std::vector<std::vector<int64_t>> expected;
  for (int s = 0; s < k + m; ++s) expected.push_back(ref.next().tokens);

  SECTION("same layout, through serialize/parse, other thread count") {
    Loader first(o, 0, 1);
    for (int s = 0; s < k; ++s) first.next();
    const std::string saved = first.cursor().serialize();
    o.loader_threads = 1;
    Loader resumed(o, 0, 1, Cursor::parse(saved));
    REQUIRE(resumed.step() == k);
    for (int s = k; s < k + m; ++s) {
      const Batch b = resumed.next();
      REQUIRE(b.step == s);
      REQUIRE(b.tokens == expected[s]);
    }
    // The resumed loader's own cursor round-trips too.
    REQUIRE(Cursor::parse(resumed.cursor().serialize()).lanes == resumed.cursor().lanes);
  }
  SECTION("cursors of 2 dp ranks merged, resumed on 1 rank") {
    Cursor merged;
    for (int r = 0; r < 2; ++r) {
      Loader part(o, r, 2);
      for (int s = 0; s < k; ++s) part.next();
      if (r == 0) merged = part.cursor();
      else merged.merge(part.cursor());
    }
    Loader resumed(o, 0, 1, merged);
    for (int s = k; s < k + 5; ++s) REQUIRE(resumed.next().tokens == expected[s]);
  }
  SECTION("a cursor without a lane's position replays that lane") {
    Loader part(o, 0, 2);
    for (int s = 0; s < k; ++s) part.next();
    Loader resumed(o, 0, 1, Cursor::parse(part.cursor().serialize()));  // lanes 2, 3 missing
    for (int s = k; s < k + 5; ++s) REQUIRE(resumed.next().tokens == expected[s]);
  }
  SECTION("a cursor of another stream is refused") {
    Loader first(o, 0, 1);
    first.next();
    const Cursor c = first.cursor();
    o.seq_len = 31;
    REQUIRE_THROWS_WITH(Loader(o, 0, 1, c), Catch::Contains("another stream"));
    REQUIRE_THROWS_AS(Cursor::parse("{\"step\": 1}"), hlp::UserError);
    REQUIRE_THROWS_AS(Cursor::parse("not json"), hlp::UserError);
  }
}

TEST_CASE("data: SentencePiece streaming of the sample corpus (txt and jsonl agree)", "[data][loader][sentencepiece]") {
  DataOptions o;
  o.tokenizer = sample("spm.model");
  o.seq_len = 64;
  o.global_batch = 4;
  o.path = sample("corpus.txt");
  Loader txt(o, 0, 1);
  o.path = sample("corpus.jsonl");
  Loader jl(o, 0, 1);
  REQUIRE(txt.vocab_size() == 4000);
  const Batch a = txt.next();
  for (int64_t id : a.tokens) REQUIRE((id >= 0 && id < 4000));
  // Row 0 (lane 0) starts at the corpus start in both: the same first document, same tokens.
  const Batch b = jl.next();
  REQUIRE(std::vector<int64_t>(a.row(0), a.row(0) + a.cols) == std::vector<int64_t>(b.row(0), b.row(0) + b.cols));
  REQUIRE(jl.stats().malformed_lines == 0);
  // One shared SentencePiece processor serves all threads: same batches for 1 and 2 threads.
  o.path = sample("corpus.txt");
  o.chunk_bytes = 8192;
  o.loader_threads = 1;
  Loader one(o, 0, 1);
  o.loader_threads = 2;
  Loader two(o, 0, 1);
  for (int s = 0; s < 20; ++s) REQUIRE(one.next().tokens == two.next().tokens);
}

TEST_CASE("data: malformed jsonl lines are skipped, counted and reported with file:line", "[data][loader][bad-input]") {
  TempDir dir;
  std::string text = jsonl({"good one", "good two"});
  text += "{\"text\": broken\n";            // line 3: not JSON
  text += "[1, 2]\n";                        // line 4: not an object
  text += "{\"body\": \"x\"}\n";             // line 5: no text field
  text += "{\"text\": 5}\n";                 // line 6: text not a string
  text += jsonl({"good three"});
  const auto path = dir.write("m.jsonl", text);
  auto o = small_options(path);
  o.global_batch = 1;
  StderrCapture capture;
  Loader loader(o, 0, 1);
  const auto docs = split_documents(lane_streams(loader, 3)[0], loader.eot_id());
  const std::string err = capture.text();
  REQUIRE(docs.size() >= 3);
  REQUIRE(docs[0] == "good one");
  REQUIRE(docs[1] == "good two");
  REQUIRE(docs[2] == "good three");
  REQUIRE(loader.stats().malformed_lines >= 4);
  REQUIRE_THAT(err, Catch::Contains(path + ":3: skipped malformed line: not valid JSON"));
  REQUIRE_THAT(err, Catch::Contains(path + ":4: skipped malformed line: not a JSON object"));
  REQUIRE_THAT(err, Catch::Contains(path + ":5: skipped malformed line: no \"text\" field"));
  REQUIRE_THAT(err, Catch::Contains(path + ":6: skipped malformed line: \"text\" is not a string"));
}

TEST_CASE("data: the jsonl field name is configurable", "[data][loader]") {
  TempDir dir;
  const auto path = dir.write("f.jsonl", jsonl({"alpha", "beta"}, "content"));
  auto o = small_options(path);
  o.global_batch = 1;
  o.jsonl_field = "content";
  Loader loader(o, 0, 1);
  const auto docs = split_documents(lane_streams(loader, 2)[0], loader.eot_id());
  REQUIRE(docs[0] == "alpha");
  REQUIRE(docs[1] == "beta");
}

TEST_CASE("data: invalid UTF-8 is replaced by U+FFFD and reported", "[data][loader][bad-input]") {
  TempDir dir;
  const auto path = dir.write("u.txt", "fine text\n\nbad \xFF\xFE byte\n\n");
  auto o = small_options(path);
  o.global_batch = 1;
  StderrCapture capture;
  Loader loader(o, 0, 1);
  const auto docs = split_documents(lane_streams(loader, 2)[0], loader.eot_id());
  REQUIRE(docs[1] == "bad \xEF\xBF\xBD\xEF\xBF\xBD byte");
  REQUIRE(loader.stats().invalid_utf8_documents >= 1);
  REQUIRE_THAT(capture.text(), Catch::Contains(path + ":3: invalid UTF-8 (2 sequences) replaced by U+FFFD"));
}

TEST_CASE("data: a corpus with no usable document fails next() instead of hanging", "[data][loader][bad-input]") {
  TempDir dir;
  const auto path = dir.write("all-bad.jsonl", "nope\n{\"x\":1}\n[]\n");
  auto o = small_options(path);
  o.global_batch = 1;
  o.max_reported_problems = 0;
  Loader loader(o, 0, 1);
  REQUIRE_THROWS_WITH(loader.next(), Catch::Contains("no usable document"));
  dir.write("blank.txt", "\n\n   \n\n");
  o.path = dir.file("blank.txt");
  Loader blank(o, 0, 1);
  REQUIRE_THROWS_WITH(blank.next(), Catch::Contains("holds no document"));
}

TEST_CASE("data: bad loader options and inputs are UserErrors naming the numbers", "[data][loader][bad-input]") {
  TempDir dir;
  dir.write("c.txt", join_txt(numbered_documents(10)));
  auto o = small_options(dir.path());
  o.global_batch = 6;
  REQUIRE_THROWS_WITH(Loader(o, 0, 4), Catch::Contains("--global-batch 6 is not divisible by the "
                                                       "data-parallel size 4"));
  o.global_batch = 4;
  REQUIRE_THROWS_AS(Loader(o, 4, 4), hlp::UserError);
  o.path = dir.file("missing.txt");
  REQUIRE_THROWS_WITH(Loader(o, 0, 1), Catch::Contains("no such file"));
  o.path = dir.path();
  o.tokenizer = dir.file("c.txt");  // exists, but not a model
  REQUIRE_THROWS_WITH(Loader(o, 0, 1), Catch::Contains("is not a SentencePiece model"));
  o.tokenizer = "byte";
  dir.write("tiny/t.txt", "one line only, no newline at the end");
  o.path = dir.file("tiny");
  o.global_batch = 8;
  REQUIRE_THROWS_WITH(Loader(o, 0, 1), Catch::Contains("holds no line start"));
}

TEST_CASE("data: last_wait_s measures the time next() waited for data", "[data][loader]") {
  // The first next() right after construction usually waits for a worker to tokenize a whole
  // 256 KiB SentencePiece chunk, but not always: on a loaded machine the constructing thread can
  // be descheduled until the worker is done, and then nothing was waited for (0.0 seen once in a
  // full-suite run beside a compile). So: every wait is >= 0, and the waits add up to
  // total_wait_s.
  DataOptions o;
  o.path = sample("corpus.txt");
  o.tokenizer = sample("spm.model");
  o.global_batch = 1;
  o.seq_len = 64;
  o.chunk_bytes = 256 * 1024;
  Loader loader(o, 0, 1);
  loader.next();
  const double first = loader.last_wait_s();
  REQUIRE(first >= 0.0);
  double sum = first;
  for (int s = 0; s < 5; ++s) {
    loader.next();
    REQUIRE(loader.last_wait_s() >= 0.0);
    sum += loader.last_wait_s();
  }
  REQUIRE(loader.total_wait_s() == Approx(sum));
}
