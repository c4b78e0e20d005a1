// A sharded checkpoint's model.safetensors.index.json (parse_safetensors_index).
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "model/hf/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    hlp::model::hf::parse_safetensors_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "model.safetensors.index.json");
  } catch (const hlp::UserError&) {
  }
  return 0;
}
