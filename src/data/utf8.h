#pragma once
// UTF-8 policy of the loader: invalid byte sequences are REPLACED by U+FFFD (EF BF BD), one
// replacement per maximal invalid subpart (the Unicode "substitution of maximal subparts"
// practice), for every tokenizer, so that the byte-level and SentencePiece paths see the same
// text and SentencePiece never receives malformed input. The loader counts repaired documents.
#include <string>
#include <string_view>

namespace hlp::data {

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Returns `text` with every invalid sequence replaced by U+FFFD; sets *replaced to the number
// of replacements made (0 when the text was valid; then the result equals the input).
std::string repair_utf8(std::string_view text, int* replaced = nullptr);

// Length in bytes of the longest prefix of `text` of at most `max_bytes` bytes that does not
// end inside a multi-byte character (used to cut over-long lines on a character boundary).
size_t utf8_safe_prefix(std::string_view text, size_t max_bytes);

}  // namespace hlp::data
