#include "data/utf8.h"

#include "common/utf8_char.h"

namespace hlp::data {

// The decoding rule (what is a character, what is one maximal invalid subpart) is
// hlp::utf8_char_length, shared with printable() for error messages.
bool is_valid_utf8(std::string_view text) {
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    const size_t n = utf8_char_length(text, i, &bad);
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
    const size_t n = utf8_char_length(text, i, &bad);
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
