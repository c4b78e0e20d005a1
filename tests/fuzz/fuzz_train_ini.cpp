// hlp-train's INI file (`--config FILE`: Boost's parse_config_file, the option values and
// validate()), then the resolved configuration printed back as INI (--print-config).
#include <cstdint>

#include "cli/options.h"
#include "common/error.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hlp::fuzz::input_file("train.ini", data, size);
  const char* argv[] = {"hlp-train", "--config", path.c_str()};
  try {
    const auto parsed = hlp::cli::parse_train_args(3, argv);
    hlp::cli::to_ini(parsed.config);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
