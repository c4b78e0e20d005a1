#pragma once
// Reads whole documents, line by line, from a byte range of the corpus (one block of a lane).
//   .txt   : a document is a run of non-blank lines; blank (whitespace-only) lines separate
//            documents; a file end ends a document. A document longer than max_document_bytes
//            is cut before the line that would pass the limit (a single longer line is cut on
//            a UTF-8 character boundary); the pieces become separate documents.
//   .jsonl : a document is one non-blank line (parsed later by the loader's workers); a line
//            longer than max_document_bytes is returned with too_long set and skipped.
// Memory: one 64 KiB window plus the document being assembled.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"

namespace hlp::data {

struct RawDocument {
  std::string bytes;      // .txt: lines joined by '\n' (no '\r'); .jsonl: the raw line
  FileFormat format = FileFormat::kText;
  size_t file = 0;        // index into Corpus::files()
  uint64_t offset = 0;    // local offset of the document's first byte in that file
  bool too_long = false;  // .jsonl line over the limit (bytes left empty)
  bool cut = false;       // .txt document ended by max_document_bytes, not by a blank line
};

// The text of a .jsonl document: the string `field` of the JSON object on `line` (valid UTF-8).
// False for a malformed line, with *why saying what is wrong ("not valid JSON", "no \"text\"
// field", ...): the loader counts and reports such lines and reads on.
bool jsonl_text(std::string_view line, const std::string& field, std::string* text,
                std::string* why);

class DocumentReader {
 public:
  DocumentReader(const Corpus& corpus, size_t max_document_bytes);
  // Reads from `begin` (a line start) up to `end` (a line start or the corpus end).
  void seek(uint64_t begin, uint64_t end);
  uint64_t position() const { return pos_; }  // next unread byte (always a line start)
  // Reads the next document of the range; false when the range is exhausted.
  bool next(RawDocument* doc);

 private:
  // The line at pos_ without its '\n' (at most max bytes; *complete = false when cut short by
  // the limit), or false at the end of the range or of the current file.
  bool peek_line(size_t max, std::string_view* line, bool* complete);
  void consume(size_t bytes_including_newline);
  bool fill(size_t want);  // makes [pos_, pos_+want) available in window_ if the file has it
  bool skip_to_next_file();

  const Corpus* corpus_;
  FileReader file_reader_;
  size_t max_document_bytes_;
  uint64_t pos_ = 0, end_ = 0;
  size_t file_ = 0;
  std::vector<char> window_;   // bytes [window_begin_, window_begin_ + window_.size())
  uint64_t window_begin_ = 0;
  size_t consumed_line_bytes_ = 0;  // bytes of the last peeked line incl. its '\n'
};

}  // namespace hlp::data
