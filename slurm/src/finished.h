#pragma once
// Sweeps are idempotent: before a sweep is rendered, the configurations whose result file is
// already complete (root attribute complete = 1 in RESULTS_DIR/<config>.h5) are left out, each
// listed once; `--rerun` keeps them. An incomplete file (a killed or failed task) keeps its
// configuration: its task resumes from its checkpoint when it has one (array.sbatch).
#include <string>
#include <vector>

#include "sweep.h"

namespace hlp::sweep {

// Removes from `sweep` (its shapes regrouped) the configurations with a complete result file
// in `results_dir`; returns their names in sweep order. A file that cannot be read counts as
// not finished. May leave the sweep empty (the caller says so and renders nothing).
std::vector<std::string> skip_finished(Sweep& sweep, const std::string& results_dir);

}  // namespace hlp::sweep
