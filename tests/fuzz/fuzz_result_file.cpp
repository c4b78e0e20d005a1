// An HDF5 result file as hlp-analyze reads it: ResultReader opens and validates it, then every
// accessor runs (run_info, hosts, clock offsets, /steps, the trace of each rank, /model,
// /pipeline, /summary), each on its own so that one bad part does not hide the others; last,
// analysis::load_runs() loads it as `hlp-analyze` does. The input is the file's bytes.
#include <cstdint>
#include <string>

#include "analysis/run_loader.h"
#include "common/error.h"
#include "fuzz_input.h"
#include "metrics/result_reader.h"

namespace {

template <typename F>
void each_part(F&& read) {
  try {
    read();
  } catch (const hlp::UserError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hlp::fuzz::input_file("result.h5", data, size);
  try {
    const hlp::metrics::ResultReader reader(path);
    each_part([&] { reader.complete(); });
    each_part([&] { reader.run_info(); });
    each_part([&] { reader.hosts(); });
    each_part([&] { reader.clock_offsets_s(); });
    each_part([&] {
      reader.step_numbers();
      for (const auto& metric : reader.step_metrics()) reader.steps(metric);
    });
    for (int rank = 0; rank < reader.world_size(); ++rank) each_part([&] { reader.trace(rank); });
    each_part([&] { reader.model(); });
    each_part([&] { reader.pipeline(); });
    each_part([&] { reader.summary(); });
  } catch (const hlp::UserError&) {
  }
  // hlp-analyze turns any exception of one file into a skipped file; crashes still show.
  hlp::analysis::load_runs({path}, /*include_incomplete=*/true);
  return 0;
}
