#pragma once
// printable(): text taken from a file (a JSON key, a header excerpt, an INI value, a regex),
// made safe to quote in an error message. `main` prints a UserError as ONE line on stderr, and
// that line must be valid UTF-8 whatever the file holds, so:
//   - valid UTF-8 passes through unchanged (names in any script stay readable);
//   - each byte of an invalid sequence and each control character (C0, DEL, C1: newlines,
//     escape sequences, NUL) is written as \xNN;
//   - text longer than max_bytes is cut on a character boundary and ends with "…".
// printable(printable(x)) == printable(x) when nothing was cut: its output is valid UTF-8 and
// free of control characters.
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/utf8_char.h"

namespace hlp {

inline constexpr size_t kPrintableMaxBytes = 200;

inline std::string printable(std::string_view text, size_t max_bytes = kPrintableMaxBytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  auto escaped = [](std::string_view bytes) {
    std::string e;
    char hex[5];
    for (unsigned char b : bytes) {
      std::snprintf(hex, sizeof(hex), "\\x%02X", b);
      e += hex;
    }
    return e;
  };
  size_t bad = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_char_length(text, i, &bad);
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c0_or_del = n == 1 && (c < 0x20 || c == 0x7F);
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
    const size_t taken = n == 0 ? 1 : n;  // an invalid subpart: escape it byte by byte
    const std::string piece = (n == 0 || c0_or_del || c1) ? escaped(text.substr(i, taken))
                                                          : std::string(text.substr(i, taken));
    if (out.size() + piece.size() > max_bytes) {
      out += "…";
      break;
    }
    out += piece;
    i += taken;
  }
  return out;
}

}  // namespace hlp
