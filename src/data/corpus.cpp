#include "data/corpus.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/error.h"

namespace hlp::data {
namespace fs = std::filesystem;

namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_corpus_file_name(const std::string& name) {
  return has_suffix(name, ".txt") || has_suffix(name, ".jsonl");
}

std::vector<std::string> resolve_paths(const std::string& spec) {
  std::vector<std::string> paths;
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (paths.empty())
      throw user_error("--data '", spec, "': the glob matches no file; check the pattern");
    // Directories matched by the glob contribute their corpus files.
    std::vector<std::string> expanded;
    for (const auto& p : paths) {
      if (fs::is_directory(p)) {
        for (const auto& e : fs::recursive_directory_iterator(p))
          if (e.is_regular_file() && is_corpus_file_name(e.path().string()))
            expanded.push_back(e.path().string());
      } else {
        expanded.push_back(p);
      }
    }
    paths = std::move(expanded);
  } else {
    std::error_code ec;
    const auto status = fs::status(spec, ec);
    if (ec || !fs::exists(status))
      throw user_error("--data '", spec, "': no such file or directory");
    if (fs::is_directory(status)) {
      for (const auto& e : fs::recursive_directory_iterator(spec))
        if (e.is_regular_file() && is_corpus_file_name(e.path().string()))
          paths.push_back(e.path().string());
      if (paths.empty())
        throw user_error("--data '", spec, "': the directory holds no .txt or .jsonl file");
    } else {
      paths.push_back(spec);
    }
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

}  // namespace

Corpus Corpus::open(const std::string& path_spec) {
  Corpus corpus;
  corpus.spec_ = path_spec;
  if (path_spec.empty()) throw user_error("--data is empty; give a file, directory or glob");
  size_t empty_files = 0;
  const auto paths = resolve_paths(path_spec);
  for (const auto& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw user_error("--data: cannot read '", path, "' (", std::strerror(errno),
                       "); fix its permissions or leave it out of the corpus");
    struct stat st {};
    const int rc = fstat(fd, &st);
    ::close(fd);
    if (rc != 0 || !S_ISREG(st.st_mode))
      throw user_error("--data: '", path, "' is not a regular file");
    if (st.st_size == 0) {
      ++empty_files;
      continue;
    }
    CorpusFile f;
    f.path = path;
    f.format = has_suffix(path, ".jsonl") ? FileFormat::kJsonl : FileFormat::kText;
    f.size_bytes = static_cast<uint64_t>(st.st_size);
    f.begin = corpus.size_bytes_;
    corpus.size_bytes_ += f.size_bytes;
    corpus.files_.push_back(std::move(f));
  }
  if (corpus.files_.empty())
    throw user_error("--data '", path_spec, "': empty corpus (", paths.size(), " file(s), ",
                     empty_files, " of them empty); nothing to train on");
  return corpus;
}

size_t Corpus::file_index(uint64_t pos) const {
  auto it = std::upper_bound(files_.begin(), files_.end(), pos,
                             [](uint64_t p, const CorpusFile& f) { return p < f.begin; });
  return static_cast<size_t>(it - files_.begin()) - 1;
}

std::optional<uint64_t> Corpus::find_cut(uint64_t from, uint64_t limit) const {
  if (from >= limit || from >= size_bytes_) return std::nullopt;
  FileReader reader(*this);
  std::optional<uint64_t> first_line_start;
  std::vector<char> buf(64 * 1024);
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  for (size_t fi = file_index(from); fi < files_.size(); ++fi) {
    const CorpusFile& f = files_[fi];
    const uint64_t start = std::max(from, f.begin);
    if (start >= limit) break;
    if (start == f.begin) return start;  // a file start is always a document boundary
    const uint64_t file_end = f.begin + f.size_bytes;
    const uint64_t stop = std::min(limit, file_end);
    char prev = 0;
    reader.read(fi, start - f.begin - 1, &prev, 1);
    bool at_line_start = prev == '\n';
    // Walk the line starts of [start, stop) through a 64 KiB window.
    // Windows grow 4 KiB → 64 KiB: a boundary is usually near, and every rank looks for the
    // start of every lane, so the first read stays small.
    size_t window = 4096;
    for (uint64_t pos = start; pos < stop; window = std::min(window * 4, buf.size())) {
      const size_t n = reader.read(fi, pos - f.begin, buf.data(),
                                   static_cast<size_t>(std::min<uint64_t>(window, file_end - pos)));
      if (n == 0) break;
      size_t i = 0;
      while (pos + i < stop && i < n) {
        if (at_line_start) {
          const uint64_t p = pos + i;
          if (f.format == FileFormat::kJsonl) return p;
          if (!first_line_start) first_line_start = p;
          // .txt: a document boundary is a blank (whitespace-only) line.
          size_t k = i;
          while (k < n && is_space(buf[k])) ++k;
          if (k < n && buf[k] == '\n') return p;
          if (k == n) {  // the line runs past the window: look at up to 256 more bytes
            char head[256];
            const size_t m = reader.read(fi, p - f.begin, head, sizeof(head));
            size_t q = 0;
            while (q < m && is_space(head[q])) ++q;
            if (q == m || head[q] == '\n') return p;
          }
        }
        const void* nl = std::memchr(buf.data() + i, '\n', n - i);
        if (!nl) {
          at_line_start = false;
          break;
        }
        i = static_cast<size_t>(static_cast<const char*>(nl) - buf.data()) + 1;
        at_line_start = true;
      }
      pos += n;
    }
  }
  return first_line_start;
}

int64_t Corpus::line_number(size_t file, uint64_t offset) const {
  FileReader reader(*this);
  std::vector<char> buf(1 << 16);
  int64_t line = 1;
  uint64_t pos = 0;
  while (pos < offset) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), offset - pos));
    const size_t n = reader.read(file, pos, buf.data(), want);
    if (n == 0) break;
    line += std::count(buf.data(), buf.data() + n, '\n');
    pos += n;
  }
  return line;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

size_t FileReader::read(size_t file, uint64_t offset, char* dst, size_t len) {
  if (file != open_file_) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::open(corpus_->files()[file].path.c_str(), O_RDONLY);
    if (fd_ < 0)
      throw std::runtime_error("cannot open '" + corpus_->files()[file].path +
                               "': " + std::strerror(errno));
    open_file_ = file;
  }
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd_, dst + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot read '" + corpus_->files()[file].path +
                               "': " + std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace hlp::data
