// Tokenizers: byte-level round trip and specials, SentencePiece loading and its errors, UTF-8.
#include "catch_compat.h"

#include "common/error.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "data_test_util.h"

using namespace hlp::data;
using hlp::data::testing::sample;
using hlp::data::testing::TempDir;

TEST_CASE("data: byte tokenizer maps bytes to ids 0..255 and has end-of-text 256", "[data][tokenizer]") {
  auto tok = make_tokenizer("byte");
  REQUIRE(tok->vocab_size() == 257);
  REQUIRE(tok->eot_id() == 256);
  std::vector<int32_t> ids;
  tok->encode("Hi \xC3\xA9", ids);
  REQUIRE(ids == std::vector<int32_t>{'H', 'i', ' ', 0xC3, 0xA9});
  REQUIRE(tok->decode(ids) == "Hi \xC3\xA9");
}

TEST_CASE("data: sentencepiece tokenizer loads the sample model and round-trips text", "[data][tokenizer]") {
  auto tok = make_tokenizer(sample("spm.model"));
  REQUIRE(tok->vocab_size() == 4000);
  REQUIRE(tok->eot_id() == 2);  // </s>
  std::vector<int32_t> ids;
  tok->encode("The jury said it did find that many laws are outmoded.", ids);
  REQUIRE(ids.size() > 3);
  REQUIRE(ids.size() < 30);  // subwords, not bytes
  for (int32_t id : ids) REQUIRE((id >= 0 && id < tok->vocab_size()));
  REQUIRE(tok->decode(ids) == "The jury said it did find that many laws are outmoded.");
  // The name (recorded in cursors) identifies the model by content, not by its directory.
  TempDir dir;
  std::filesystem::copy_file(sample("spm.model"), dir.file("spm.model"));
  REQUIRE(make_tokenizer(dir.file("spm.model"))->name() == tok->name());
  REQUIRE_THAT(tok->name(), Catch::StartsWith("sentencepiece:spm.model#"));
}

TEST_CASE("data: a tokenizer file that is not a SentencePiece model is a UserError", "[data][tokenizer][bad-input]") {
  TempDir dir;
  const auto bogus = dir.write("bogus.model", "this is not a protobuf model\n");
  REQUIRE_THROWS_AS(make_tokenizer(bogus), hlp::UserError);
  REQUIRE_THROWS_WITH(make_tokenizer(bogus), Catch::Contains("is not a SentencePiece model"));
  REQUIRE_THROWS_WITH(make_tokenizer(dir.file("missing.model")), Catch::Contains("no such file"));
  REQUIRE_THROWS_WITH(make_tokenizer(dir.path()), Catch::Contains("not a regular file"));
}

TEST_CASE("data: invalid UTF-8 is replaced by U+FFFD, valid text is untouched", "[data][utf8]") {
  int replaced = -1;
  REQUIRE(repair_utf8("plain \xE2\x82\xAC text", &replaced) == "plain \xE2\x82\xAC text");
  REQUIRE(replaced == 0);
  REQUIRE(is_valid_utf8("\xF0\x9F\x98\x80"));
  REQUIRE_FALSE(is_valid_utf8("\xC0\xAF"));        // overlong
  REQUIRE_FALSE(is_valid_utf8("\xED\xA0\x80"));    // surrogate
  REQUIRE_FALSE(is_valid_utf8("\xE2\x82"));        // truncated
  REQUIRE(repair_utf8("a\xFF" "b", &replaced) == "a\xEF\xBF\xBD" "b");
  REQUIRE(replaced == 1);
  // A truncated 3-byte character is one maximal subpart → one replacement.
  REQUIRE(repair_utf8("x\xE2\x82y", &replaced) == "x\xEF\xBF\xBDy");
  REQUIRE(replaced == 1);
  REQUIRE(repair_utf8("\xC0\xAF", &replaced) == "\xEF\xBF\xBD\xEF\xBF\xBD");
  REQUIRE(replaced == 2);
  REQUIRE(utf8_safe_prefix("ab\xE2\x82\xAC", 3) == 2);  // never ends inside the euro sign
}
