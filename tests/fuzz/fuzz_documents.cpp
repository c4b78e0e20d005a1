// The corpus reader of --data (Corpus, DocumentReader, find_cut, jsonl_text) on one file. The
// first input byte picks the format (bit 0: .jsonl, else .txt) and max_document_bytes (bits
// 1-7: 1 to 127 bytes, so short limits cut lines and documents); the rest is the file. The
// whole file is read, then the ranges between the cuts a lane layout would choose at each
// quarter. Every document must be non-empty and, for .txt, within the limit.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "data/corpus.h"
#include "data/document_reader.h"
#include "data/utf8.h"
#include "fuzz_input.h"

namespace {

void read_range(const hlp::data::Corpus& corpus, size_t max_document_bytes, uint64_t begin,
                uint64_t end) {
  hlp::data::DocumentReader reader(corpus, max_document_bytes);
  reader.seek(begin, end);
  hlp::data::RawDocument doc;
  uint64_t documents = 0;
  while (reader.next(&doc)) {
    if (++documents > corpus.size_bytes()) __builtin_trap();  // no progress
    if (doc.too_long) continue;
    if (doc.bytes.empty()) __builtin_trap();
    if (doc.format == hlp::data::FileFormat::kText) {
      if (doc.bytes.size() > max_document_bytes) __builtin_trap();
      continue;
    }
    std::string text, why;
    hlp::data::jsonl_text(hlp::data::repair_utf8(doc.bytes), "text", &text, &why);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool jsonl = data[0] & 1;
  const size_t max_document_bytes = std::max(1, data[0] >> 1);
  const std::string path =
      hlp::fuzz::input_file(jsonl ? "corpus.jsonl" : "corpus.txt", data + 1, size - 1);
  try {
    const auto corpus = hlp::data::Corpus::open(path);
    const uint64_t n = corpus.size_bytes();
    read_range(corpus, max_document_bytes, 0, n);
    uint64_t begin = 0;
    for (uint64_t quarter = 1; quarter <= 4; ++quarter) {
      const auto cut = corpus.find_cut(quarter * n / 4, n);
      const uint64_t end = cut ? *cut : n;
      if (end < begin) __builtin_trap();
      read_range(corpus, max_document_bytes, begin, end);
      begin = end;
    }
    if (begin < n) read_range(corpus, max_document_bytes, begin, n);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
