#pragma once
// The pipeline bubble measured from a result file's trace events (issue #7), next to the value
// the pipeline strategy measured in process (/pipeline bubble_fraction) and the theory
// (p-1)/(m+p-1). Definition (also in analysis/README.md), for one step s:
//
//   pipeline   the pp ranks with equal (dp, tp) coordinates: world rank = (d·pp + i)·tp + t
//   spans      the rank's "forward" and "backward" events on the compute lane with step = s
//   window     [min start, max end] of the spans of ALL the pipeline's ranks in step s: one
//              window for every stage, so the first stage's early start and the last stage's
//              late end count as idle time of the others
//   bubble     of one stage (rank): 1 − |union of its spans| / |window|  (union: overlapping
//              spans count once)
//
// A (pipeline, step) in which some stage has no such span (its events were not recorded) has no
// common window and is left out whole; so is one whose window has zero length.
//
// Replay (when the file names its schedule): each stage's spans of the step, in time order, are
// the durations of its schedule table's actions (parallel/pipeline_schedule.h); the tables run
// on the ideal clock at exactly those durations give the bubble the schedule's dependencies
// alone make of them. measured - replayed is what the run added: message latency and waits
// outside the table. A step whose span counts do not match the tables is not replayed.
//
// Step theory (the same steps): the tables on the ideal clock with every action of a virtual
// stage at that stage's mean F, B, W duration in the step (parallel::mean_costs): the schedule's
// theory at the stage costs the step had. It equals the closed form when the stages are equal
// and takes in what makes them unequal in a step (a slower core, the head's stage); what it
// leaves to the replay is the spread of durations inside a stage.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/trace_event.h"

namespace hlp::analysis {

// Per step of the file (same order as /steps/step): the bubbles of that step summed over every
// (pipeline, stage) that has one, and their count. A run's bubble over a set of steps is
// Σ sum / Σ count, the mean over pipelines, stages and steps.
struct TraceBubble {
  std::vector<double> sum;     // [steps]
  std::vector<int64_t> count;  // [steps]
  int64_t left_out = 0;        // (pipeline, step) pairs without a common window (see above)
  std::vector<double> replay_sum;     // [steps]: the replayed bubbles (see above), summed
  std::vector<int64_t> replay_count;  // [steps]
  std::vector<double> step_theory_sum;     // [steps]: the step theory's bubbles (see above)
  std::vector<int64_t> step_theory_count;  // [steps]
};

// The schedule a file's pipeline ran (/pipeline): enough to rebuild its tables.
struct ScheduleInfo {
  std::string schedule;
  int64_t virtual_chunks = 1, micro_batches = 0;
};

// events_per_rank[r]: the trace of world rank r; mesh = {dp, pp, tp}; step_numbers: /steps/step.
// All zero counts when the file has no forward/backward spans (tracing was off).
// schedule: nullptr, or what to replay (replay_* stay zero when absent or not replayable).
TraceBubble trace_bubble(const std::vector<std::vector<metrics::TraceEvent>>& events_per_rank,
                         const std::array<int64_t, 3>& mesh,
                         const std::vector<int64_t>& step_numbers,
                         const ScheduleInfo* schedule = nullptr);

// Total length covered by [start, end) intervals (overlaps counted once).
double union_length(std::vector<std::pair<double, double>> intervals);

}  // namespace hlp::analysis
