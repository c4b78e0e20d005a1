#pragma once
// The headline table: one line per configuration, at most ten columns (strategy, GPUs, context,
// tokens/s per device, peak GiB per device, MFU, scaling efficiency against single, exposed
// communication %, pipeline bubble %), as Markdown for the report and as a LaTeX booktabs
// tabular for a paper. The full table stays in table.csv.
#include <iosfwd>
#include <string>
#include <vector>

#include "analysis/aggregate.h"

namespace hlp::analysis {

struct HeadlineRow {
  std::string strategy;  // competitor_label() within its group
  bool gpu = false;      // devices are GPUs (else CPU ranks)
  int64_t devices = 0, context = 0;
  double tokens_per_s_per_device = 0, peak_gib_per_device = 0, mfu = 0;
  double scaling_efficiency = 0;  // T_N / (N · T_1), T_1 = the matching single run; NaN if none
  double comm_exposed = 0, bubble = 0;  // fractions; bubble NaN without a pipeline
};

// Groups in findings order (context, then devices), fastest first inside a group.
std::vector<HeadlineRow> headline_rows(const std::vector<ConfigRow>& rows);

// The single-rank `single` row measuring the same thing as `row` (every configuration column
// but the mesh, world size and pipeline settings equal); nullptr when the table has none.
const ConfigRow* matching_single(const ConfigRow& row, const std::vector<ConfigRow>& rows);

void write_headline_markdown(std::ostream& out, const std::vector<HeadlineRow>& rows);
// A `table` float holding a booktabs tabular (needs \usepackage{booktabs}); LaTeX specials in
// strategy names are escaped.
void write_headline_latex(std::ostream& out, const std::vector<HeadlineRow>& rows);

std::string latex_escape(const std::string& s);

}  // namespace hlp::analysis
