#pragma once
// Starting a rendered sweep: on Slurm (sbatch the arrays, then the analysis job with
// --dependency=afterany on all of them: it runs once every task ended, failed ones included, and
// the report lists what has no result), or on this machine without Slurm (each configuration in
// turn under `mpiexec -n <ranks>`, then hlp-analyze), printing one progress line per job.
#include <string>
#include <vector>

#include "render.h"
#include "sweep.h"

namespace hlp::sweep {

// Runs argv (PATH lookup for argv[0]), stdout + stderr appended to `log_path`, or captured into
// *captured when given. Returns the exit status (128 + signal when killed).
int run_process(const std::vector<std::string>& argv, const std::string& log_path,
                std::string* captured);

struct SubmittedJob {
  std::string kind;     // "array" or "analysis"
  std::string script;   // file name in the sweep directory
  std::string job_id;
};

// Runs sbatch --parsable for every array, then for the analysis job; writes <out>/submitted.txt
// ("array <script> <id>" lines, then "analysis <script> <id>"). Throws UserError when sbatch fails.
std::vector<SubmittedJob> submit_sweep(const Sweep& sweep, const RenderedSweep& rendered);

struct LocalRunOptions {
  std::string hlp_bin;   // holds hlp-train and hlp-analyze
  std::string mpiexec;   // "mpiexec" or a path
};

// Returns the number of configurations that failed (their logs are in <out>/logs/<config>.log);
// the analysis runs over whatever results exist if at least one configuration succeeded.
int run_sweep_locally(const Sweep& sweep, const RenderedSweep& rendered, const LocalRunOptions& options);

}  // namespace hlp::sweep
