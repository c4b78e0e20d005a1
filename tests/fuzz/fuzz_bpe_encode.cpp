// Encoding arbitrary bytes (invalid UTF-8, control characters, added-token text, long runs)
// with Qwen3's real tokenizer.json, as the loader does for every document, then decoding the
// ids. Every id must lie in [0, vocab_size). No UserError is expected either: any document is
// valid input to a real tokenizer, so one would stop a training run on good data.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

#ifndef HLP_QWEN3_TOKENIZER
#error "HLP_QWEN3_TOKENIZER: the path of Qwen3's tokenizer.json (CMake defines it)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<hlp::data::Tokenizer> tokenizer =
      hlp::data::make_tokenizer(HLP_QWEN3_TOKENIZER);
  std::vector<int32_t> ids;
  tokenizer->encode(std::string_view(reinterpret_cast<const char*>(data), size), ids);
  for (int32_t id : ids)
    if (id < 0 || id >= tokenizer->vocab_size()) __builtin_trap();
  tokenizer->decode(ids);
  return 0;
}
