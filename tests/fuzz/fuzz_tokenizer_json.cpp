// A Hugging Face tokenizer.json given to --tokenizer (load_hf_bpe_spec and the BPE tokenizer
// built from it), then encoding and decoding text with it. The input is the file, optionally
// followed by a NUL byte and the text to encode (JSON text holds no raw NUL); without one a
// fixed multilingual sample is encoded. Every id must lie in [0, vocab_size).
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "data/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t json_bytes = nul ? size_t(nul - data) : size;
  const std::string_view text =
      nul ? std::string_view(reinterpret_cast<const char*>(nul + 1), size - json_bytes - 1)
          : std::string_view("Hello, world! <|endoftext|> caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 12345\n\n  ab");
  const std::string path = hlp::fuzz::input_file("tokenizer.json", data, json_bytes);
  try {
    const auto tokenizer = hlp::data::make_tokenizer(path);
    std::vector<int32_t> ids;
    tokenizer->encode(text, ids);
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer->vocab_size()) __builtin_trap();
    tokenizer->decode(ids);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
