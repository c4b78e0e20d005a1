#pragma once
// The configuration table as Markdown (for people: units in headers, configuration columns that
// are equal in every row moved to one line above the table) and as CSV (for programs: every
// configuration column, every number at full precision, empty cell = not measured).
#include <ostream>
#include <string>
#include <vector>

#include "analysis/aggregate.h"

namespace hlp::analysis {

// CSV header names of the metric columns, in order (after config_columns() and
// runs, incomplete_runs, steps_used). Units are in the names.
const std::vector<std::string>& csv_metric_columns();

void write_csv(std::ostream& out, const std::vector<ConfigRow>& rows);
void write_markdown(std::ostream& out, const std::vector<ConfigRow>& rows, int64_t warmup_steps);

}  // namespace hlp::analysis
