#pragma once
// The two Unicode services the byte-level BPE tokenizer needs, each behind one small class so
// that only unicode_text.cpp includes ICU and PCRE2:
//   to_nfc        Unicode NFC (ICU's Normalizer2), with a no-copy fast path for text that is
//                 NFC by construction (every code point below U+0300);
//   RegexSplitter a Hugging Face Split(pattern, Isolated) with PCRE2 in UTF + UCP mode (\p{L},
//                 \p{N}, Unicode \s, case-insensitive groups, look-ahead), JIT-compiled.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace hlp::data {

// NFC of `text` (valid UTF-8). Returns `text` itself when it is already NFC; otherwise writes
// the normalized form into `storage` and returns a view of it.
std::string_view to_nfc(std::string_view text, std::string& storage);

class RegexSplitter {
 public:
  // Throws hlp::UserError naming the pattern when PCRE2 rejects it.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls piece(start, length) for every match of the pattern in `text` (valid UTF-8) and for
  // every non-empty stretch between matches, left to right: the pieces tile the text
  // (Hugging Face's SplitDelimiterBehavior::Isolated). Thread-safe; match state is per thread.
  // Throws hlp::UserError when the pattern backtracks catastrophically on `text` (it exceeds a
  // step budget linear in text.size(), unicode_text.cpp); the caller names the file.
  template <typename F>
  void split(std::string_view text, F&& piece) const {
    split_impl(text, [](void* f, size_t start, size_t length) { (*static_cast<F*>(f))(start, length); },
               &piece);
  }

 private:
  void split_impl(std::string_view text, void (*emit)(void*, size_t, size_t), void* ctx) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hlp::data
