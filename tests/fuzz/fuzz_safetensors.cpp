// A .safetensors file's header (parse_safetensors_header): the input is the whole file.
// Accepted headers must describe tensors that lie inside the file, which the target checks by
// touching the first and last byte of each (ASan reports a read outside the input).
#include <cstdint>

#include "common/error.h"
#include "model/hf/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = hlp::model::hf::parse_safetensors_header(data, size, "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& [name, entry] : header.entries) {
      if (entry.end == entry.begin) continue;
      sink = sink + data[header.data_start + entry.begin] + data[header.data_start + entry.end - 1];
    }
  } catch (const hlp::UserError&) {
  }
  return 0;
}
