#include "finished.h"

#include <filesystem>

#include <hdf5.h>

#include <cstdint>

namespace hlp::sweep {
namespace fs = std::filesystem;

namespace {

// The root attribute `complete` (docs/results-schema.md) read straight from the file; a file
// that is missing, damaged or without it is not finished (its configuration runs again).
bool complete_result(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return false;
  int64_t complete = 0;
  H5E_BEGIN_TRY {  // HDF5's own error stack stays quiet: "not finished" is the answer
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0) {
      const hid_t a = H5Aexists(f, "complete") > 0 ? H5Aopen(f, "complete", H5P_DEFAULT) : -1;
      if (a < 0 || H5Aread(a, H5T_NATIVE_INT64, &complete) < 0) complete = 0;
      if (a >= 0) H5Aclose(a);
      H5Fclose(f);
    }
  }
  H5E_END_TRY;
  return complete == 1;
}

}  // namespace

std::vector<std::string> skip_finished(Sweep& sweep, const std::string& results_dir) {
  std::vector<std::string> finished;
  std::vector<Config> kept;
  for (const Config& c : sweep.configs) {
    if (complete_result(fs::path(results_dir) / (c.name + ".h5"))) finished.push_back(c.name);
    else kept.push_back(c);
  }
  if (finished.empty()) return finished;
  sweep.configs = std::move(kept);
  group_shapes(sweep);
  return finished;
}

}  // namespace hlp::sweep
