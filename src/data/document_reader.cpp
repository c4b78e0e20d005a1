#include "data/document_reader.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/utf8.h"

namespace hlp::data {
namespace {

constexpr size_t kWindowBytes = 64 * 1024;

bool is_blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

bool jsonl_text(std::string_view line, const std::string& field, std::string* text,
                std::string* why) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) *why = "not valid JSON";
  else if (!j.is_object()) *why = "not a JSON object";
  else if (!j.contains(field)) *why = "no \"" + field + "\" field";
  else if (!j[field].is_string()) *why = "\"" + field + "\" is not a string";
  else {
    *text = j[field].get<std::string>();
    return true;
  }
  return false;
}

DocumentReader::DocumentReader(const Corpus& corpus, size_t max_document_bytes)
    : corpus_(&corpus), file_reader_(corpus), max_document_bytes_(std::max<size_t>(max_document_bytes, 1)) {}

void DocumentReader::seek(uint64_t begin, uint64_t end) {
  pos_ = begin;
  end_ = std::min(end, corpus_->size_bytes());
  window_.clear();
  window_begin_ = begin;
  if (pos_ < end_) file_ = corpus_->file_index(pos_);
}

bool DocumentReader::fill(size_t want) {
  const CorpusFile& f = corpus_->files()[file_];
  const uint64_t stop = std::min(end_, f.begin + f.size_bytes);
  if (pos_ < window_begin_ || pos_ > window_begin_ + window_.size()) {
    window_.clear();
    window_begin_ = pos_;
  }
  const uint64_t window_end = window_begin_ + window_.size();
  if (window_end >= stop || window_end - pos_ >= want) return true;
  // Drop consumed bytes, then read enough for `want` (at least one window).
  window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(pos_ - window_begin_));
  window_begin_ = pos_;
  const uint64_t have_end = window_begin_ + window_.size();
  const size_t target = std::max(want, kWindowBytes);
  const size_t more = static_cast<size_t>(
      std::min<uint64_t>(stop - have_end, target > window_.size() ? target - window_.size() : 0));
  const size_t old = window_.size();
  window_.resize(old + more);
  const size_t got = file_reader_.read(file_, have_end - f.begin, window_.data() + old, more);
  window_.resize(old + got);
  return got == more;
}

bool DocumentReader::peek_line(size_t max, std::string_view* line, bool* complete) {
  const CorpusFile& f = corpus_->files()[file_];
  const uint64_t stop = std::min(end_, f.begin + f.size_bytes);
  if (pos_ >= stop) return false;
  size_t want = kWindowBytes;
  while (true) {
    const bool complete_read = fill(want);
    const char* base = window_.data() + (pos_ - window_begin_);
    const size_t avail =
        static_cast<size_t>(std::min<uint64_t>(window_begin_ + window_.size(), stop) - pos_);
    const void* nl = std::memchr(base, '\n', std::min(avail, max + 1));
    if (nl) {
      const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - base);
      *line = std::string_view(base, len);
      *complete = true;
      consumed_line_bytes_ = len + 1;
      return true;
    }
    if (avail > max) {  // longer than the limit: hand out a piece ending on a character boundary
      const size_t len = utf8_safe_prefix(std::string_view(base, avail), max);
      *line = std::string_view(base, len);
      *complete = false;
      consumed_line_bytes_ = len;
      return true;
    }
    if (pos_ + avail >= stop) {  // last line of the file or range, without '\n'
      *line = std::string_view(base, avail);
      *complete = true;
      consumed_line_bytes_ = avail;
      return true;
    }
    if (!complete_read)
      throw user_error("corpus file '", f.path, "' is shorter than when the run started (",
                       f.size_bytes, " bytes); do not change the corpus during a run");
    want = std::max(want, avail) * 2;
  }
}

void DocumentReader::consume(size_t bytes) { pos_ += bytes; }

bool DocumentReader::skip_to_next_file() {
  if (pos_ >= end_) return false;
  file_ = corpus_->file_index(pos_);
  window_.clear();
  window_begin_ = pos_;
  return true;
}

bool DocumentReader::next(RawDocument* doc) {
  std::string_view line;
  bool complete = false;
  // Skip blank lines (and move across file ends) to the first line of the next document.
  while (true) {
    if (pos_ >= end_) return false;
    const CorpusFile& f = corpus_->files()[file_];
    if (pos_ >= f.begin + f.size_bytes) {
      if (!skip_to_next_file()) return false;
      continue;
    }
    if (!peek_line(max_document_bytes_, &line, &complete)) return false;
    if (complete && is_blank(line)) {
      consume(consumed_line_bytes_);
      continue;
    }
    break;
  }
  const CorpusFile& f = corpus_->files()[file_];
  doc->bytes.clear();
  doc->format = f.format;
  doc->file = file_;
  doc->offset = pos_ - f.begin;
  doc->too_long = false;
  doc->cut = false;

  if (f.format == FileFormat::kJsonl) {
    if (complete) {
      doc->bytes.assign(line.data(), line.size());
      consume(consumed_line_bytes_);
      return true;
    }
    doc->too_long = true;  // skip the whole line, piece by piece
    do {
      consume(consumed_line_bytes_);
    } while (peek_line(max_document_bytes_, &line, &complete) && !complete);
    if (pos_ < end_ && complete) consume(consumed_line_bytes_);
    return true;
  }

  while (true) {
    const std::string_view text = complete ? strip_cr(line) : line;
    if (complete && is_blank(text)) break;  // the separator stays for the next call to skip
    const size_t extra = (doc->bytes.empty() ? 0 : 1) + text.size();
    if (!doc->bytes.empty() && doc->bytes.size() + extra > max_document_bytes_) {
      doc->cut = true;
      break;
    }
    if (!doc->bytes.empty()) doc->bytes += '\n';
    doc->bytes.append(text.data(), text.size());
    consume(consumed_line_bytes_);
    if (!complete) {  // a piece of an over-long line is a document of its own
      doc->cut = true;
      break;
    }
    if (!peek_line(max_document_bytes_, &line, &complete)) break;
  }
  return true;
}

}  // namespace hlp::data
