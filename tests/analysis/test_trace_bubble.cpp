// Unit tests of the pipeline bubble measured from trace events (analysis/trace_bubble.h) on
// in-memory events: union of spans, one window per pipeline and step, the mesh's rank layout,
// steps left out, and the warm-up / mean rule of run_trace_bubble. The same rule on a file
// written by the real ResultWriter is checked by check_table.py (pp_traced_m2.h5).
#include "catch_compat.h"

#include <cmath>

#include "analysis/aggregate.h"
#include "analysis/trace_bubble.h"
#include "common/error.h"

namespace an = hlp::analysis;
namespace m = hlp::metrics;

namespace {
m::TraceEvent span(const char* name, int64_t step, double start_s, double end_s,
                   m::Lane lane = m::Lane::Compute) {
  m::TraceEvent e;
  e.name = name;
  e.lane = lane;
  e.step = step;
  e.start_s = start_s;
  e.end_s = end_s;
  return e;
}
}  // namespace

TEST_CASE("analysis: union_length counts overlapping and nested spans once") {
  CHECK(an::union_length({}) == 0.0);
  CHECK(an::union_length({{0, 1}, {2, 3}}) == 2.0);
  CHECK(an::union_length({{2, 3}, {0, 1.5}, {1, 2.5}}) == 3.0);  // chain, unsorted
  CHECK(an::union_length({{0, 4}, {1, 2}}) == 4.0);              // nested
  CHECK(an::union_length({{0, 1}, {1, 2}}) == 2.0);              // touching
  CHECK(an::union_length({{5, 5}, {3, 2}}) == 0.0);              // empty / reversed
}

TEST_CASE("analysis: trace bubble uses one window for all stages of a step") {
  // Stage 0 works [0, 1] and [3, 4], stage 1 [1, 3]: window [0, 4] for both.
  const std::vector<std::vector<m::TraceEvent>> ev = {
      {span("forward", 7, 0, 1), span("backward", 7, 3, 4), span("optimizer", 7, 4, 10),
       span("forward", 7, -5, 0, m::Lane::Comm)},
      {span("forward", 7, 1, 2), span("backward", 7, 2, 3)}};
  const auto tb = an::trace_bubble(ev, {1, 2, 1}, {7});
  REQUIRE(tb.sum.size() == 1);
  CHECK(tb.count[0] == 2);
  CHECK(tb.sum[0] == 0.5 + 0.5);  // own windows would give stage 0 0.5 and stage 1 0
  CHECK(tb.left_out == 0);
}

TEST_CASE("analysis: trace bubble takes the union of a stage's overlapping spans") {
  const std::vector<std::vector<m::TraceEvent>> ev = {
      {span("forward", 0, 0, 2), span("forward", 0, 1, 3)},  // busy 3, not 4
      {span("backward", 0, 3, 4)}};
  const auto tb = an::trace_bubble(ev, {1, 2, 1}, {0});
  CHECK(tb.sum[0] == (1.0 - 3.0 / 4.0) + (1.0 - 1.0 / 4.0));
}

TEST_CASE("analysis: trace bubble leaves out a step where a stage has no span") {
  const std::vector<std::vector<m::TraceEvent>> ev = {
      {span("forward", 0, 0, 1), span("backward", 0, 2, 3), span("forward", 1, 5, 6)},
      {span("forward", 0, 1, 2), span("optimizer", 1, 5, 9)}};
  const auto tb = an::trace_bubble(ev, {1, 2, 1}, {0, 1});
  CHECK(tb.count[0] == 2);
  CHECK(tb.count[1] == 0);
  CHECK(tb.sum[1] == 0.0);
  CHECK(tb.left_out == 1);
}

TEST_CASE("analysis: trace bubble groups ranks into pipelines by the mesh layout") {
  // dp=1, pp=2, tp=2: world rank = pp_i * 2 + tp_i, so the pipelines are {0, 2} and {1, 3}.
  // Pipeline {0, 2}: window [0, 4], busy 1 and 1 -> 0.75 each. Pipeline {1, 3}: window [0, 2],
  // busy 1 and 1 -> 0.5 each. Pairing {0, 1} and {2, 3} would give other windows.
  const std::vector<std::vector<m::TraceEvent>> ev = {
      {span("forward", 0, 0, 1)}, {span("forward", 0, 0, 1)},
      {span("backward", 0, 3, 4)}, {span("backward", 0, 1, 2)}};
  const auto tb = an::trace_bubble(ev, {1, 2, 2}, {0});
  CHECK(tb.count[0] == 4);
  CHECK(tb.sum[0] == 0.75 + 0.75 + 0.5 + 0.5);
  // dp=2, pp=2, tp=1: world rank = d * 2 + pp_i, pipelines {0, 1} and {2, 3}.
  const auto dp2 = an::trace_bubble(ev, {2, 2, 1}, {0});
  // {0, 1}: window [0, 1], busy 1 and 1 -> 0, 0. {2, 3}: window [1, 4]: 2/3 and 2/3.
  CHECK(dp2.sum[0] == Approx(0.0 + 0.0 + 2.0 / 3.0 + 2.0 / 3.0).epsilon(1e-15));
}

TEST_CASE("analysis: trace bubble of a run without trace events is empty, a bad mesh an error") {
  const std::vector<std::vector<m::TraceEvent>> none(2);
  const auto tb = an::trace_bubble(none, {1, 2, 1}, {0, 1});
  CHECK(tb.count == std::vector<int64_t>{0, 0});
  CHECK(tb.left_out == 0);
  CHECK_THROWS_AS(an::trace_bubble(none, {1, 3, 1}, {0}), hlp::UserError);
}

TEST_CASE("analysis: a run's trace bubble is the mean over stages and post-warm-up steps") {
  an::RunData run;
  run.step_numbers = {0, 1, 2};
  run.trace_bubble.sum = {1.8, 1.0, 0.25};  // step 0: warm-up
  run.trace_bubble.count = {2, 2, 1};       // step 2: one stage (a second pipeline left out)
  CHECK(an::run_trace_bubble(run, 1) == (1.0 + 0.25) / 3.0);
  CHECK(an::run_trace_bubble(run, 0) == Approx((1.8 + 1.0 + 0.25) / 5.0).epsilon(1e-15));
  CHECK(an::run_trace_bubble(run, 9) == 0.25);  // longer warm-up: the last step stays
  run.trace_bubble.count = {2, 0, 0};
  CHECK(std::isnan(an::run_trace_bubble(run, 1)));
  an::RunData untraced;
  untraced.step_numbers = {0, 1};
  CHECK(std::isnan(an::run_trace_bubble(untraced, 1)));
}
