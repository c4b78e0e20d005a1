// Corpus discovery, document boundaries of the reader, lane layout coverage, bad paths.
#include <sys/stat.h>
#include <unistd.h>

#include "catch_compat.h"
#include <set>

#include "common/error.h"
#include "data/corpus.h"
#include "data/document_reader.h"
#include "data/lane_layout.h"
#include "data_test_util.h"

using namespace hlp::data;
using hlp::data::testing::TempDir;

namespace {
std::vector<std::string> read_all(const Corpus& c, uint64_t begin, uint64_t end, size_t max_doc = 1 << 20) {
  DocumentReader r(c, max_doc);
  r.seek(begin, end);
  std::vector<std::string> docs;
  RawDocument d;
  while (r.next(&d)) docs.push_back(d.too_long ? "<too long>" : d.bytes);
  return docs;
}
}  // namespace

TEST_CASE("data: txt documents are separated by blank lines, file ends end documents", "[data][corpus]") {
  TempDir dir;
  dir.write("a.txt", "\n\nfirst doc\nstill first\n\n\n  \t\nsecond doc\r\nline two\r\n\r\nthird");
  dir.write("b.txt", "fourth (no blank line before, new file)\n");
  const Corpus c = Corpus::open(dir.path());
  REQUIRE(c.files().size() == 2);
  REQUIRE(c.files()[0].path == dir.file("a.txt"));  // sorted
  const auto docs = read_all(c, 0, c.size_bytes());
  REQUIRE(docs == std::vector<std::string>{"first doc\nstill first", "second doc\nline two", "third",
                                           "fourth (no blank line before, new file)"});
}

TEST_CASE("data: jsonl documents are lines, over-long lines are flagged", "[data][corpus]") {
  TempDir dir;
  dir.write("x.jsonl", "{\"text\":\"a\"}\n\n{\"text\":\"" + std::string(100, 'z') + "\"}\n{\"text\":\"b\"}");
  const Corpus c = Corpus::open(dir.file("x.jsonl"));
  REQUIRE(c.files()[0].format == FileFormat::kJsonl);
  REQUIRE(read_all(c, 0, c.size_bytes(), 64) ==
          std::vector<std::string>{"{\"text\":\"a\"}", "<too long>", "{\"text\":\"b\"}"});
}

TEST_CASE("data: a txt document longer than max_document_bytes is cut at line boundaries", "[data][corpus]") {
  TempDir dir;
  dir.write("long.txt", "aaaa\nbbbb\ncccc\ndddd\n\nshort\n");
  const Corpus c = Corpus::open(dir.file("long.txt"));
  REQUIRE(read_all(c, 0, c.size_bytes(), 10) ==
          std::vector<std::string>{"aaaa\nbbbb", "cccc\ndddd", "short"});
  // A single line over the limit is cut into pieces.
  dir.write("line.txt", "0123456789abcdef\n");
  REQUIRE(read_all(Corpus::open(dir.file("line.txt")), 0, 17, 16) ==
          std::vector<std::string>{"0123456789abcdef"});
  REQUIRE(read_all(Corpus::open(dir.file("line.txt")), 0, 17, 6).size() == 3);
}

TEST_CASE("data: cuts fall on document boundaries when there is one, else on line starts", "[data][corpus]") {
  TempDir dir;
  const std::string text = "one\ntwo\n\nthree\nfour\nfive\n";
  dir.write("c.txt", text);
  const Corpus c = Corpus::open(dir.file("c.txt"));
  REQUIRE(c.find_cut(0, 5) == 0u);                           // file start
  REQUIRE(c.find_cut(1, text.size()) == text.find("\n\n") + 1);  // the blank line
  REQUIRE(c.find_cut(10, text.size()) == text.find("four"));   // no blank line left: a line start
  REQUIRE_FALSE(c.find_cut(text.size() - 3, text.size()).has_value());
}

TEST_CASE("data: a document boundary far away is found across read windows", "[data][corpus]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "line " + std::to_string(i) + " of one long document\n";
  const uint64_t blank = text.size();
  text += "   \nnext document\n";
  dir.write("far.txt", text);
  const Corpus c = Corpus::open(dir.file("far.txt"));
  REQUIRE(blank > 64 * 1024);
  REQUIRE(c.find_cut(3, text.size()) == blank);
  REQUIRE(c.find_cut(3, blank) == text.find('\n') + 1);  // none in the window: a line start
}

TEST_CASE("data: lanes partition the corpus and every document is read once per epoch", "[data][layout]") {
  TempDir dir;
  const auto docs = hlp::data::testing::numbered_documents(200);
  std::vector<std::string> part1(docs.begin(), docs.begin() + 120), part2(docs.begin() + 120, docs.end());
  dir.write("p1.txt", hlp::data::testing::join_txt(part1));
  dir.write("sub/p2.txt", hlp::data::testing::join_txt(part2));
  const Corpus c = Corpus::open(dir.path());
  for (int G : {1, 3, 8, 16}) {
    const auto lanes = build_lanes(c, G, /*block_bytes=*/512, 0, G);
    REQUIRE(lanes.front().begin == 0);
    REQUIRE(lanes.back().end == c.size_bytes());
    std::multiset<std::string> seen;
    for (int j = 0; j < G; ++j) {
      if (j > 0) REQUIRE(lanes[j].begin == lanes[j - 1].end);
      // One epoch of lane j: its blocks in the epoch's order.
      const auto order = block_order(42, j, 0, lanes[j].block_begin.size());
      for (uint32_t b : order)
        for (const auto& d : read_all(c, lanes[j].block_begin[b], lanes[j].block_end(b))) seen.insert(d);
    }
    REQUIRE(seen == std::multiset<std::string>(docs.begin(), docs.end()));
  }
}

TEST_CASE("data: block order is a seeded permutation that changes with the epoch", "[data][layout]") {
  const auto a = block_order(1, 0, 0, 50), b = block_order(1, 0, 1, 50), c = block_order(2, 0, 0, 50);
  REQUIRE(a == block_order(1, 0, 0, 50));
  REQUIRE(a != b);
  REQUIRE(a != c);
  REQUIRE(std::set<uint32_t>(a.begin(), a.end()).size() == 50);
}

TEST_CASE("data: bad corpus paths are UserErrors naming the problem", "[data][corpus][bad-input]") {
  TempDir dir;
  REQUIRE_THROWS_WITH(Corpus::open(dir.file("nope.txt")), Catch::Contains("no such file"));
  REQUIRE_THROWS_WITH(Corpus::open(dir.path() + "/*.jsonl"), Catch::Contains("matches no file"));
  REQUIRE_THROWS_WITH(Corpus::open(dir.path()), Catch::Contains("holds no .txt or .jsonl"));
  dir.write("empty.txt", "");
  REQUIRE_THROWS_WITH(Corpus::open(dir.file("empty.txt")), Catch::Contains("empty corpus"));
  REQUIRE_THROWS_AS(Corpus::open(dir.path()), hlp::UserError);
}

TEST_CASE("data: an unreadable corpus file is a UserError", "[data][corpus][bad-input]") {
  TempDir dir;
  dir.write("good.txt", "hello\n");
  if (geteuid() != 0) {
    const auto locked = dir.write("locked.txt", "secret\n");
    chmod(locked.c_str(), 0);
  } else {
    // root reads every mode; a dangling symlink is a file root cannot read either.
    REQUIRE(symlink((dir.path() + "/gone").c_str(), dir.file("locked.txt").c_str()) == 0);
  }
  REQUIRE_THROWS_AS(Corpus::open(dir.path() + "/*.txt"), hlp::UserError);
  REQUIRE_THROWS_WITH(Corpus::open(dir.path() + "/*.txt"), Catch::Contains("cannot read") &&
                                                               Catch::Contains("locked.txt"));
}

TEST_CASE("data: a corpus file that shrinks during a run is an error, not a hang", "[data][corpus][bad-input]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "a line of text number " + std::to_string(i) + "\n";
  const auto path = dir.write("shrink.txt", text);
  const Corpus c = Corpus::open(path);
  dir.write("shrink.txt", text.substr(0, 1000));  // truncated after the corpus was opened
  REQUIRE_THROWS_WITH(read_all(c, 0, c.size_bytes()), Catch::Contains("is shorter than when the run started"));
}
