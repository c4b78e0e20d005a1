#pragma once
// The report's answer to the study's question, computed from the table: per group of comparable
// configurations (same model, device, precision, base dtype, context length and number of
// ranks) the fastest and the leanest configuration with their margins, a tie where the
// difference lies within the step-to-step spread, the Pareto front of tokens/s per device
// against peak memory per device, and one generated reason line per configuration taken from
// its own measured step-time and memory breakdown. Also what was not measured (skipped files,
// configurations of the sweep without a result file, configurations the planner left out).
#include <iosfwd>
#include <string>
#include <vector>

#include "analysis/aggregate.h"
#include "analysis/run_loader.h"

namespace hlp::analysis {

// The columns that make runs comparable (issue 38): the rest of the configuration is what the
// competitors in a group differ in (strategy, mesh, schedule, checkpointing, ...).
const std::vector<std::string>& comparable_columns();

struct Group {
  std::string title;                   // "tiny · cpu · fp32 (base fp32) · T 128 · 2 ranks"
  std::vector<const ConfigRow*> rows;  // table order
  std::vector<std::string> varying;    // columns that tell two rows of one strategy apart
};

std::vector<Group> comparable_groups(const std::vector<ConfigRow>& rows);

// "fsdp2", or "pp (pp_split uniform, micro_batches 4)" when the group varies in those columns.
std::string competitor_label(const ConfigRow& row, const Group& group);

// The quantities compared, per device: tokens/s per device and peak bytes per device.
double tokens_per_device(const ConfigRow& row);
// Two rows tie in throughput / memory when the interquartile ranges of their per-step values
// overlap: the difference of their medians lies within the step-to-step spread.
bool throughput_tie(const ConfigRow& a, const ConfigRow& b);
bool memory_tie(const ConfigRow& a, const ConfigRow& b);

// Members not dominated (no other row at least as fast per device AND at most as much peak
// memory per device, better in one); table order. Rows without both numbers are left out.
std::vector<const ConfigRow*> pareto_front(const std::vector<const ConfigRow*>& rows);

// One sentence on why `row` sits where it does in its group: its step time against the fastest
// member's, attributed to the phases that differ most, and its peak against the leanest's,
// attributed to the memory parts that differ most; the fastest / leanest get their own shares.
std::string reason_line(const ConfigRow& row, const Group& group);

// What the comparison lacks: files skipped, expected configurations without a result file and
// configurations left out before they ran (name + why, one line each).
struct NotMeasured {
  std::string name;
  std::string why;
};

void write_findings(std::ostream& out, const std::vector<ConfigRow>& rows,
                    const std::vector<NotMeasured>& not_measured);

}  // namespace hlp::analysis
