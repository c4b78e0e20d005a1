#pragma once
// Writing a sweep to disk: per-task INI files, one sbatch script per job array (from
// slurm/templates/array.sbatch), the analysis job (analyze.sbatch) and submit.sh.
//
//   <out>/<sweep>-n<ranks>.sbatch     one job array per resource shape
//   <out>/<sweep>-analyze.sbatch      hlp-analyze report, after the arrays
//   <out>/submit.sh                   sbatch the arrays, then the analysis with afterany
//   <out>/configs/<config>.ini        what hlp-train reads with --config
//   <out>/results/<config>.h5, <out>/report/, <out>/logs/, <out>/checkpoints/<config>/
#include <map>
#include <string>
#include <vector>

#include "site.h"
#include "sweep.h"

namespace hlp::sweep {

struct RenderOptions {
  Site site = Site::local;
  std::string out_dir;        // the sweep's directory (made absolute)
  std::string hlp_bin;        // directory holding hlp-train and hlp-analyze (absolute)
  std::string template_dir;   // slurm/templates
  std::string results_dir;    // overrides the job file's results-dir when set (relative to cwd)
  std::string report_dir;     // overrides the job file's report-dir when set (relative to cwd)
};

struct RenderedSweep {
  std::string sweep_dir, results_dir, report_dir, log_dir;  // absolute
  std::vector<std::string> array_scripts;                   // file names in sweep_dir, one per shape
  std::string analysis_script;                              // file name in sweep_dir
  std::string submit_script;                                // absolute path of submit.sh
};

// Replaces every {{key}} in `text`; an unknown or unused-looking key is an error naming the template.
std::string fill_template(const std::string& text, const std::map<std::string, std::string>& values,
                          const std::string& template_name);

// "abc/d" stays as is; anything with shell-special characters is single-quoted.
std::string shell_quote(const std::string& word);

// Writes every file of the sweep; throws UserError when a directory or template is unusable.
// Where the result files go: --results-dir, else the job file's results-dir under --out.
std::string results_dir_for(const JobFile& job, const RenderOptions& options);

RenderedSweep render_sweep(const JobFile& job, const Sweep& sweep, const RenderOptions& options);

}  // namespace hlp::sweep
