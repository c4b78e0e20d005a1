#pragma once
// `hlp-analyze report`: OUTDIR/index.md that begins with the Findings (findings.h), then the
// headline table (also OUTDIR/headline.md and the LaTeX OUTDIR/table.tex), the cost in
// device-hours (and service units with a charge rate), the full table (table.md, table.csv),
// every figure that has data (NAME.dat, NAME.gp, NAME.png, NAME.svg) with one sentence each,
// and the figures skipped for lack of data.
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "analysis/aggregate.h"
#include "analysis/findings.h"
#include "analysis/run_loader.h"

namespace hlp::analysis {

struct ReportOptions {
  int64_t warmup_steps = 1;
  // Service units charged per GPU-hour (a site's rate, passed by hlp-sweep's analysis job);
  // NaN: the cost section shows device-hours only.
  double su_per_gpu_hour = std::numeric_limits<double>::quiet_NaN();
  // A sweep's output directory (hlp-sweep --out): its configs/*.ini are the configurations that
  // should have a result file, its pruned.txt those the planner left out before submission.
  std::string sweep_dir;
};

struct ReportSummary {
  bool gnuplot = true;  // false: figures written as .dat + .gp, not rendered (no_gnuplot_note)
  int figures_rendered = 0;
  int figures_skipped = 0;
  size_t not_measured = 0;
};

// What the comparison lacks: skipped files, then (with a sweep directory) its configurations
// that left no result file among `result_paths` and those the planner left out.
std::vector<NotMeasured> not_measured(const std::vector<Skip>& skipped,
                                      const std::vector<std::string>& result_paths,
                                      const std::string& sweep_dir);

// "## Cost": device-hours per configuration and in total (GPU-hours, or rank-hours on CPU), and
// service units = GPU-hours × su_per_gpu_hour when the runs used GPUs and a rate is given.
void write_cost(std::ostream& out, const std::vector<ConfigRow>& rows, double su_per_gpu_hour);

ReportSummary write_report(const std::vector<ConfigRow>& rows, const std::vector<Skip>& skipped,
                           const std::string& outdir, const ReportOptions& options);

}  // namespace hlp::analysis
