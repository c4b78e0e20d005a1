#pragma once
// Helpers for the data tests: a temporary directory that cleans up, file writing, the sample.
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/loader.h"

namespace hlp::data::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hlp-data-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = file(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::string path_;
};

inline std::string source_dir() {
  const char* d = std::getenv("HLP_SOURCE_DIR");
  return d ? d : HLP_TEST_SOURCE_DIR;
}
inline std::string sample(const std::string& name) { return source_dir() + "/datasets/sample/" + name; }

// A corpus of n distinguishable documents "doc <i>: ..." of varying length.
inline std::vector<std::string> numbered_documents(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string d = "doc " + std::to_string(i) + ":";
    for (int w = 0; w < 3 + (i * 7) % 11; ++w) d += " word" + std::to_string((i + w) % 13);
    if (i % 4 == 1) d += "\nsecond line of doc " + std::to_string(i);
    docs.push_back(d);
  }
  return docs;
}

inline std::string join_txt(const std::vector<std::string>& docs) {
  std::string s;
  for (const auto& d : docs) s += d + "\n\n";
  return s;
}

// Splits a byte-tokenizer stream at end-of-text tokens into document strings.
inline std::vector<std::string> split_documents(const std::vector<int64_t>& ids, int eot) {
  std::vector<std::string> docs(1);
  for (int64_t id : ids) {
    if (id == eot) docs.emplace_back();
    else docs.back() += static_cast<char>(id);
  }
  docs.pop_back();  // the unfinished tail
  return docs;
}

// Reads `steps` batches; returns, per global row, the concatenated tokens of that row.
inline std::vector<std::vector<int64_t>> lane_streams(Loader& loader, int steps) {
  std::vector<std::vector<int64_t>> lanes(loader.lanes());
  for (int s = 0; s < steps; ++s) {
    const Batch b = loader.next();
    for (int r = 0; r < b.rows; ++r) lanes[r].insert(lanes[r].end(), b.row(r), b.row(r) + b.cols);
  }
  return lanes;
}

}  // namespace hlp::data::testing
