#pragma once
// `hlp-analyze report`: OUTDIR/table.md + table.csv, every figure that has data (NAME.dat,
// NAME.gp, NAME.png, NAME.svg) and OUTDIR/index.md that embeds the figures, one sentence each,
// and names the figures skipped for lack of data.
#include <string>
#include <vector>

#include "analysis/aggregate.h"
#include "analysis/run_loader.h"

namespace hlp::analysis {

struct ReportSummary {
  int figures_rendered = 0;
  int figures_skipped = 0;
};

ReportSummary write_report(const std::vector<ConfigRow>& rows, const std::vector<Skip>& skipped,
                           const std::string& outdir, int64_t warmup_steps);

}  // namespace hlp::analysis
