// The pipeline schedule tables (parallel/pipeline_schedule.h): every table is complete and
// ordered, its messages pair up between neighbours, it never deadlocks on an ideal clock, and
// its simulated bubble equals the schedule's closed-form theory; in-flight counts as documented.
#include "catch_compat.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"

using namespace hlp::parallel;

namespace {

PipeSpec spec(const std::string& schedule, int p, int M, int V = 1) {
  PipeSpec s;
  s.schedule = parse_pipe_schedule(schedule);  // an unknown name is a UserError here
  s.stages = p;
  s.micro_batches = M;
  s.chunks = V;
  return s;
}

std::vector<PipeSpec> all_specs() {
  std::vector<PipeSpec> out;
  for (int p : {1, 2, 3, 4})
    for (int M = 1; M <= 9; ++M) {
      for (const char* s : {"gpipe", "1f1b", "zb-h1"})
        if (p >= 2 || std::string(s) != "zb-h1") out.push_back(spec(s, p, M));
      if (M % p == 0 && p >= 2)  // interleaving needs two stages
        for (int V : {2, 3}) out.push_back(spec("interleaved", p, M, V));
    }
  return out;
}

std::string name(const PipeSpec& s) {
  return std::string(to_string(s.schedule)) + " p" + std::to_string(s.stages) + " V" +
         std::to_string(s.chunks) + " M" +
         std::to_string(s.micro_batches);
}

}  // namespace

TEST_CASE("pipeline schedules: every table runs each unit's forward, then its backward, once",
          "[parallel][schedule]") {
  for (const auto& s : all_specs()) {
    INFO(name(s));
    for (int stage = 0; stage < s.stages; ++stage) {
      std::map<std::pair<int, int>, std::string> done;  // (chunk, micro) -> ops so far
      for (const auto& a : stage_actions(s, stage)) {
        REQUIRE(a.chunk >= 0);
        REQUIRE(a.chunk < s.chunks);
        REQUIRE(a.micro >= 0);
        REQUIRE(a.micro < s.micro_batches);
        done[{a.chunk, a.micro}] += to_string(a.op);
      }
      REQUIRE(done.size() == size_t(s.chunks * s.micro_batches));
      // "F" then "BW" (fused), or "F" then "B" then "W" (split): in order, each once
      for (const auto& [unit, ops] : done) CHECK(ops == "FBW");
    }
  }
}

TEST_CASE("pipeline schedules: what one stage sends is what its neighbour needs, in one order",
          "[parallel][schedule]") {
  for (const auto& s : all_specs()) {
    INFO(name(s));
    for (int from = 0; from < s.stages; ++from)
      for (int to = 0; to < s.stages; ++to) {
        std::set<int> sent, needed;
        for (const auto& m : messages_between(s, from, to)) CHECK(sent.insert(m.tag).second);
        for (const auto& a : stage_actions(s, to)) {
          const PipeMessage m = message_needed(s, to, a);
          if (m.valid && m.from_stage == from) CHECK(needed.insert(m.tag).second);
        }
        CHECK(sent == needed);
      }
  }
}

TEST_CASE("pipeline schedules: the ideal clock reproduces each schedule's closed-form bubble",
          "[parallel][schedule]") {
  // (f, b, w) per micro-batch through a whole stage: balanced, LoRA-like (W tiny), full-FT-like
  const std::vector<PipeCosts> costs{{1, 1, 1}, {1, 1.2, 0.05}, {1, 1.1, 0.9}};
  for (const auto& s : all_specs()) {
    if (s.micro_batches < s.stages) continue;  // the formulas assume a full pipeline
    // all warm-up
    if (s.schedule == PipeSchedule::interleaved && s.micro_batches == s.stages) continue;
    for (const auto& c : costs) {
      INFO(name(s) << " f " << c.f << " b " << c.b << " w " << c.w);
      const double V = s.chunks;
      const PipeSimulation sim = simulate(s, {{c.f / V, c.b / V, c.w / V}});
      CHECK(sim.bubble_fraction() == Approx(bubble_theory(s, c.f, c.b, c.w)).margin(1e-12));
    }
  }
}

TEST_CASE("pipeline schedules: zero bubble's gain shrinks with W (what LoRA leaves of it)",
          "[parallel][schedule]") {
  const auto one = spec("1f1b", 4, 8), zb = spec("zb-h1", 4, 8);
  // full finetuning: W about B -> idle (p-1)(f+b-w) is a third of 1F1B's (p-1)(f+b+w)
  CHECK(simulate(zb, {{1, 1, 1}}).makespan - 8 * 3 == Approx(3 * 1));
  CHECK(simulate(one, {{1, 1, 1}}).makespan - 8 * 3 == Approx(3 * 3));
  // LoRA: W = 0 -> no gain at all
  CHECK(simulate(zb, {{1, 2, 0}}).makespan == Approx(simulate(one, {{1, 2, 0}}).makespan));
}

TEST_CASE("pipeline schedules: micro-batches held at once", "[parallel][schedule]") {
  for (int s = 0; s < 4; ++s) {
    CHECK(peak_in_flight(spec("gpipe", 4, 8), s) == 8);
    CHECK(peak_in_flight(spec("1f1b", 4, 8), s) == 4 - s);
    CHECK(peak_in_flight(spec("1f1b", 4, 2), s) == std::min(2, 4 - s));
    CHECK(peak_in_flight(spec("zb-h1", 4, 8), s) == 4);  // 1F1B's stage-0 peak on every stage
  }
  // interleaved: Megatron's warm-up (p - s - 1) 2 + (V - 1) p units, plus the one in steady state
  for (int s = 0; s < 4; ++s)
    CHECK(peak_in_flight(spec("interleaved", 4, 16, 2), s) == (4 - s - 1) * 2 + 4 + 1);
  // zb-h1 with what a unit holds from its B to its W: stage 1 of p 2 defers one W, so after
  // F0 B0 F1 B1 two units are alive and both past their B (F0 B0 F1 B1 W0 F2 ...)
  const auto zb = stage_actions(spec("zb-h1", 2, 4), 1);
  CHECK(peak_alive(zb, [](int) { return 1.0; }, [](int) { return 0.0; }) == 2);
  CHECK(peak_alive(zb, [](int) { return 1.0; }, [](int) { return 0.5; }) == 3);
  // chunk weights: the per-chunk counts of stage 0 (chunk 0 heavier)
  const auto actions = stage_actions(spec("interleaved", 2, 4, 2), 0);
  CHECK(peak_alive(actions, [](int c) { return c == 0 ? 10.0 : 1.0; }) >
        peak_alive(actions, [](int c) { return c == 0 ? 1.0 : 10.0; }));
}

TEST_CASE("pipeline schedules: combinations that cannot run are user errors",
          "[parallel][schedule]") {
  CHECK_THROWS_AS(validate_schedule(spec("2f2b", 2, 4)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("interleaved", 2, 4, 1)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("interleaved", 4, 6, 2)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("1f1b", 2, 4, 2)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("zb-h1", 2, 4, 2)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("interleaved", 1, 4, 2)), hlp::UserError);
  CHECK_THROWS_AS(validate_schedule(spec("zb-h1", 1, 4)), hlp::UserError);
  CHECK_NOTHROW(validate_schedule(spec("interleaved", 4, 8, 2)));
}

TEST_CASE("pipeline schedules: the ideal clock takes per-chunk costs (a run's own theory)",
          "[parallel][schedule]") {
  const auto inter = spec("interleaved", 2, 8, 2);
  const PipeCosts c{0.5, 0.6, 0.4};
  // one entry for every virtual stage, all equal: the same clock as one entry for all
  const std::vector<PipeCosts> same(4, c);
  CHECK(simulate(inter, same).makespan == Approx(simulate(inter, {c}).makespan).margin(1e-12));
  // unequal stages: the lighter stage idles for the difference, above the closed form
  const auto one = spec("1f1b", 2, 8);
  const PipeSimulation uneven = simulate(one, {{1.0, 2.0, 0.0}, {1.2, 2.4, 0.0}});
  CHECK(uneven.bubble_fraction() > bubble_theory(one, 1.1, 2.2, 0.0));
  CHECK(uneven.busy[0] == Approx(8 * 3.0));
  CHECK(uneven.busy[1] == Approx(8 * 3.6));
  CHECK_THROWS_AS(simulate(inter, std::vector<PipeCosts>(3, c)), std::logic_error);
}

TEST_CASE("pipeline schedules: a replay of measured durations runs the same clock",
          "[parallel][schedule]") {
  for (const auto& s : all_specs()) {
    INFO(name(s));
    // every action at its table's cost: the replay is the simulation
    const PipeCosts c{1.0, 1.5, 0.5};
    std::vector<std::vector<double>> durations;
    for (int stage = 0; stage < s.stages; ++stage) {
      durations.emplace_back();
      for (const auto& a : stage_actions(s, stage)) durations.back().push_back(c.of(a.op));
      CHECK(int64_t(durations.back().size()) == stage_action_count(s));
    }
    CHECK(replay(s, durations).makespan == Approx(simulate(s, {c}).makespan).margin(1e-12));
  }
  // gpipe, one micro-batch, two stages: F0 F1 B1 B0 in sequence, each stage idle half the time
  const auto one = spec("gpipe", 2, 1);
  CHECK(replay(one, {{1.0, 3.0}, {2.0, 4.0}}).bubble_fraction() == Approx(0.5));
  CHECK_THROWS_AS(replay(one, {{1.0}, {2.0, 4.0}}), std::invalid_argument);
}

TEST_CASE("pipeline schedules: a step's mean per-chunk costs give its theory (step theory)",
          "[parallel][schedule]") {
  for (const auto& s : all_specs()) {
    INFO(name(s));
    // every virtual stage its own costs; each action's duration spread around them by +-20 %
    // in alternation, so the mean is the cost again
    std::vector<PipeCosts> costs;
    for (int g = 0; g < s.virtual_stages(); ++g)
      costs.push_back({1.0 + 0.1 * g, 1.5 + 0.05 * g, s.splits_backward() ? 0.5 : 0.0});
    std::vector<std::vector<double>> durations;
    for (int stage = 0; stage < s.stages; ++stage) {
      durations.emplace_back();
      std::map<std::pair<int, int>, int> seen;  // (chunk, op): how many so far
      for (const auto& a : stage_actions(s, stage)) {
        const int k = seen[{a.chunk, int(a.op)}]++;
        const double spread = s.micro_batches % 2 == 0 ? (k % 2 == 0 ? 1.2 : 0.8) : 1.0;
        durations.back().push_back(costs[size_t(s.virtual_stage(stage, a.chunk))].of(a.op) * spread);
      }
    }
    const std::vector<PipeCosts> mean = mean_costs(s, durations);
    REQUIRE(mean.size() == costs.size());
    for (size_t g = 0; g < costs.size(); ++g) {
      CHECK(mean[g].f == Approx(costs[g].f));
      CHECK(mean[g].b + mean[g].w == Approx(costs[g].b + costs[g].w));
      if (s.splits_backward()) CHECK(mean[g].w == Approx(costs[g].w));
    }
    CHECK(simulate(s, mean).makespan == Approx(simulate(s, costs).makespan));
  }
  // equal stages: the step theory is the closed form
  const auto one = spec("1f1b", 2, 8);
  std::vector<std::vector<double>> equal(2);
  for (int stage = 0; stage < 2; ++stage)
    for (const auto& a : stage_actions(one, stage))
      equal[size_t(stage)].push_back(PipeCosts{1.0, 2.0, 0.0}.of(a.op));
  CHECK(simulate(one, mean_costs(one, equal)).bubble_fraction() ==
        Approx(bubble_theory(one, 1.0, 2.0, 0.0)).margin(1e-12));
  CHECK_THROWS_AS(mean_costs(one, {{1.0}, {2.0}}), std::invalid_argument);
}
