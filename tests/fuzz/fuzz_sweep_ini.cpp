// hlp-sweep's experiment file (parse_job_file: sections, settings, axes, exclude rules), then
// its expansion into configurations (expand_sweep evaluates every exclude rule on each) and
// the per-task INI text of each.
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"
#include "job_file.h"
#include "sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto job = hlp::sweep::parse_job_file(in, "fuzz.ini");
    const auto sweep = hlp::sweep::expand_sweep(job);
    for (const auto& config : sweep.configs) hlp::sweep::config_ini(sweep, config, job.path);
  } catch (const hlp::UserError&) {
  }
  return 0;
}
