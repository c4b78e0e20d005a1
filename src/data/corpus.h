#pragma once
// The corpus as one virtual byte string: the files matched by --data, in sorted path order,
// concatenated. Global byte offsets into that string are how lanes, blocks and cursors name a
// position. Nothing here holds file contents; reads are pread()s of small ranges.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hlp::data {

enum class FileFormat { kText, kJsonl };  // .jsonl → kJsonl, anything else → kText

struct CorpusFile {
  std::string path;
  FileFormat format = FileFormat::kText;
  uint64_t size_bytes = 0;
  uint64_t begin = 0;  // global offset of the file's first byte
};

class Corpus {
 public:
  // path_spec: a file, a directory (searched recursively for *.txt and *.jsonl) or a glob.
  // Throws hlp::UserError for a missing path, a glob or directory matching no corpus file, an
  // unreadable file, or a corpus whose files are all empty.
  static Corpus open(const std::string& path_spec);

  const std::vector<CorpusFile>& files() const { return files_; }  // non-empty files only
  uint64_t size_bytes() const { return size_bytes_; }
  const std::string& spec() const { return spec_; }

  // Index into files() of the file holding global offset `pos` (pos < size_bytes()).
  size_t file_index(uint64_t pos) const;

  // The first line start in [from, limit) where a lane or block may begin, or nothing:
  // preferably a document boundary (a file start, a blank line of a .txt file, any line start
  // of a .jsonl file), else any line start. Reads at most limit - from bytes (+ one line).
  std::optional<uint64_t> find_cut(uint64_t from, uint64_t limit) const;

  // 1-based line number of local offset `offset` in file `file` (scans the file's prefix; only
  // used for error messages).
  int64_t line_number(size_t file, uint64_t offset) const;

 private:
  std::string spec_;
  std::vector<CorpusFile> files_;
  uint64_t size_bytes_ = 0;
};

// Reads byte ranges of corpus files; keeps the current file open. Not thread-safe (one per lane).
class FileReader {
 public:
  explicit FileReader(const Corpus& corpus) : corpus_(&corpus) {}
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  // Reads up to `len` bytes of file `file` from local offset `offset`; returns the count read
  // (short only at the end of the file). Throws std::runtime_error on an I/O error.
  size_t read(size_t file, uint64_t offset, char* dst, size_t len);

 private:
  const Corpus* corpus_;
  size_t open_file_ = SIZE_MAX;
  int fd_ = -1;
};

}  // namespace hlp::data
