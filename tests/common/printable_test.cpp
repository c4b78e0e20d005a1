// printable(): text quoted from a file into an error message is one line of valid UTF-8.
#include "catch_compat.h"

#include <string>

#include "common/printable.h"
#include "common/utf8_char.h"

using hlp::printable;

namespace {

bool valid_utf8_without_controls(const std::string& s) {
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = hlp::utf8_char_length(s, i, &bad);
    if (n == 0) return false;
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 1 && (c < 0x20 || c == 0x7F)) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("printable: valid UTF-8 without control characters passes unchanged",
          "[common][printable]") {
  for (const std::string text :
       {"model.layers.0.mlp.up_proj.weight", "größe", "注意力", "🙂 emoji", "back\\slash", ""})
    CHECK(printable(text) == text);
}

TEST_CASE("printable: invalid bytes and control characters become hex escapes", "[common][printable]") {
  CHECK(printable("a\xFF" "b") == "a\\xFFb");
  CHECK(printable("\xC3") == "\\xC3");                   // a character cut short
  CHECK(printable("\xED\xA0\x80") == "\\xED\\xA0\\x80");  // a surrogate
  CHECK(printable("\xC0\xAF") == "\\xC0\\xAF");           // an overlong '/'
  CHECK(printable("line\nnext\r\t\x1B[2J") == "line\\x0Anext\\x0D\\x09\\x1B[2J");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("\x7F \xC2\x85") == "\\x7F \\xC2\\x85");  // DEL, and NEL (a C1 control)
  const std::string hostile = "\xFF\xFE\n\xE2\x82 ok \xF0\x9F\x99\x82";
  CHECK(valid_utf8_without_controls(printable(hostile)));
  CHECK(printable(printable(hostile)) == printable(hostile));
}

TEST_CASE("printable: a long excerpt is cut on a character boundary and ends with …",
          "[common][printable]") {
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text += "ж";  // 2 bytes each
  const std::string cut = printable(long_text);
  CHECK(cut.size() <= hlp::kPrintableMaxBytes + std::string("…").size());
  CHECK(cut.substr(cut.size() - 3) == "…");
  CHECK(valid_utf8_without_controls(cut));
  CHECK(printable("abcdef", 3) == "abc…");
  CHECK(printable("\xFF\xFF", 5) == "\\xFF…");  // an escape is never split
  CHECK(printable(long_text, std::string::npos) == long_text);
}
