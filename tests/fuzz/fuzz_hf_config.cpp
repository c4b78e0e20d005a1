// A Hugging Face config.json given to --model-config (read_hf_config: the mapping to
// ModelConfig and its validate()), then the provenance text HLP prints from it.
#include <cstdint>

#include "common/error.h"
#include "fuzz_input.h"
#include "model/hf/config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hlp::fuzz::input_file("config.json", data, size);
  try {
    const auto hf = hlp::model::hf::read_hf_config(path);
    hlp::model::hf::provenance_text(hf);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
