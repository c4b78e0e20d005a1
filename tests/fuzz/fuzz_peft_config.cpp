// A PEFT adapter's adapter_config.json given to --load-adapter (read_peft_config and
// LoraConfig::validate), then the projections of a hybrid model it selects (targets_module,
// which the model, the accounting and the checkpoint names ask for every linear module).
#include <cstdint>
#include <filesystem>

#include "common/error.h"
#include "fuzz_input.h"
#include "model/accounting.h"
#include "model/config.h"
#include "model/hf/peft_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto linears = hlp::model::linear_table(hlp::model::preset("tiny"));
  const std::string path = hlp::fuzz::input_file("adapter_config.json", data, size);
  try {
    const auto lora = hlp::model::hf::read_peft_config(
        std::filesystem::path(path).parent_path().string(), hlp::model::LoraConfig{});
    for (const auto& linear : linears) lora.targets_module(linear.module);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
