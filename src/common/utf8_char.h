#pragma once
// The one UTF-8 decoder rule of HLP: how long the character at a position is, or how many bytes
// form the maximal invalid subpart there (the Unicode "substitution of maximal subparts"
// practice). Used by the loader's repair (data/utf8.cpp) and by printable() for messages.
#include <cstddef>
#include <string_view>

namespace hlp {

// Length of the valid UTF-8 character starting at s[i] (no overlongs, no surrogates,
// <= U+10FFFF), or 0 if the bytes there are invalid; then *bad_len gets the length of the
// maximal invalid subpart (>= 1).
inline size_t utf8_char_length(std::string_view s, size_t i, size_t* bad_len) {
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

}  // namespace hlp
