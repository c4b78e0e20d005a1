#include "data/utf8.h"

namespace hlp::data {
namespace {

// Length of the valid UTF-8 character starting at s[i], or 0 if the bytes there are invalid.
// On invalid input, *bad_len gets the length of the maximal invalid subpart (>= 1).
size_t valid_char_length(std::string_view s, size_t i, size_t* bad_len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  *bad_len = 1;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    *bad_len = k;  // a valid prefix of a character is one maximal invalid subpart
    if (i + k >= s.size()) return 0;
    const unsigned char b = byte(i + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
  }
  return need;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    const size_t n = valid_char_length(text, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair_utf8(std::string_view text, int* replaced) {
  int count = 0;
  std::string out;
  size_t i = 0, bad = 0;
  if (is_valid_utf8(text)) {
    if (replaced) *replaced = 0;
    return std::string(text);
  }
  out.reserve(text.size() + 8);
  while (i < text.size()) {
    const size_t n = valid_char_length(text, i, &bad);
    if (n > 0) {
      out.append(text.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++count;
      i += bad;
    }
  }
  if (replaced) *replaced = count;
  return out;
}

size_t utf8_safe_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t cut = max_bytes;
  // Step back over continuation bytes (10xxxxxx) to the start of the character at `cut`.
  size_t back = 0;
  while (cut > 0 && back < 4 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
    ++back;
  }
  return cut == 0 ? max_bytes : cut;
}

}  // namespace hlp::data
