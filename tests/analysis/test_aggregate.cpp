// Unit tests of the aggregation rules on in-memory runs (no files): INI parsing, medians,
// warm-up exclusion, pooling of reruns (expert load included), the rank reductions, CSV layout.
#include "catch_compat.h"

#include <cmath>
#include <sstream>

#include "analysis/aggregate.h"
#include "analysis/run_loader.h"
#include "analysis/table_writer.h"
#include "metrics/schema.h"

namespace an = hlp::analysis;
namespace schema = hlp::metrics::schema;

namespace {
an::RunData run(const std::string& strategy, int64_t seq_len, std::vector<double> step_time_s) {
  an::RunData r;
  r.path = strategy + std::to_string(seq_len);
  r.complete = true;
  for (const auto& c : an::config_columns()) r.config[c] = "x";
  r.config["strategy"] = strategy;
  r.config["seq_len"] = std::to_string(seq_len);
  r.config["world_size"] = "2";
  for (size_t i = 0; i < step_time_s.size(); ++i) r.step_numbers.push_back(int64_t(i));
  r.per_step[schema::kStepTime] = step_time_s;
  return r;
}
}  // namespace

TEST_CASE("analysis: parse_ini keeps key = value lines, drops comments and sections") {
  const auto ini = an::parse_ini("# c\n[run]\nsteps = 3\n; x\nseq-len=64\npattern = \n  lr = 1e-3 \n");
  CHECK(ini.at("steps") == "3");
  CHECK(ini.at("seq-len") == "64");
  CHECK(ini.at("pattern").empty());
  CHECK(ini.at("lr") == "1e-3");
  CHECK(ini.size() == 4);
}

TEST_CASE("analysis: median_of odd, even, empty") {
  CHECK(an::median_of({3, 1, 2}) == 2.0);
  CHECK(an::median_of({4, 1, 3, 2}) == 2.5);
  CHECK(std::isnan(an::median_of({})));
}

TEST_CASE("analysis: rank reductions: max for times and bytes, min for throughput, mean for loss") {
  CHECK(an::reduction_for(schema::kStepTime) == an::RankReduction::Max);
  CHECK(an::reduction_for(schema::kPeakBytes) == an::RankReduction::Max);
  CHECK(an::reduction_for(schema::kTokensPerS) == an::RankReduction::Min);
  CHECK(an::reduction_for(schema::kMfuExecuted) == an::RankReduction::Min);
  CHECK(an::reduction_for(schema::kLoss) == an::RankReduction::Mean);
}

TEST_CASE("analysis: reruns pool their post-warm-up steps, other configurations stay apart") {
  std::vector<an::RunData> runs = {run("ddp", 64, {100, 1, 2, 3}), run("ddp", 64, {50, 4, 5}),
                                   run("ddp", 128, {9, 8}), run("fsdp", 64, {7, 6, 5})};
  runs[1].path = "rerun";
  const auto rows = an::aggregate(runs, 1);
  REQUIRE(rows.size() == 3);
  // sorted: ddp 64, ddp 128 (numeric), fsdp 64
  CHECK(rows[0].value("seq_len") == "64");
  CHECK(rows[1].value("seq_len") == "128");
  CHECK(rows[2].value("strategy") == "fsdp");
  CHECK(rows[0].runs == 2);
  CHECK(rows[0].steps_used == 5);
  const auto& st = rows[0].stats.at(schema::kStepTime);
  CHECK(st.median == 3.0);  // pool {1,2,3,4,5}: warm-up 100 and 50 left out
  CHECK(st.min == 1.0);
  CHECK(st.max == 5.0);
  CHECK(rows[1].stats.at(schema::kStepTime).median == 8.0);
  CHECK(rows[2].stats.at(schema::kStepTime).median == 5.5);
}

TEST_CASE("analysis: a run shorter than the warm-up keeps its last step") {
  const auto rows = an::aggregate({run("ddp", 64, {10, 20})}, 5);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].steps_used == 1);
  CHECK(rows[0].stats.at(schema::kStepTime).median == 20.0);
}

TEST_CASE("analysis: NaN steps (ranks that reported nothing) are ignored") {
  const auto rows = an::aggregate({run("ddp", 64, {1, NAN, 4, 2})}, 1);
  CHECK(rows[0].stats.at(schema::kStepTime).median == 3.0);
  CHECK(rows[0].stats.at(schema::kStepTime).n == 2);
}

TEST_CASE("analysis: expert load pools reruns per layer and expert, busiest / mean per layer") {
  auto moe = [](std::vector<int64_t> tokens) {
    an::RunData r = run("ddp+ep2", 64, {1, 2});
    r.expert_load.experts = 2;
    r.expert_load.layers = {1, 3};
    r.expert_load.tokens = std::move(tokens);  // [layer 1: e0 e1, layer 3: e0 e1]
    return r;
  };
  std::vector<an::RunData> runs = {moe({3, 1, 0, 0}), moe({1, 3, 0, 0}), run("ddp", 64, {1, 2})};
  runs[1].path = "rerun";
  const auto rows = an::aggregate(runs, 1);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].expert_load.empty());  // ddp: dense
  const an::ExpertLoad& load = rows[1].expert_load;
  const std::vector<int64_t> pooled = {4, 4, 0, 0};
  REQUIRE(load.tokens == pooled);
  CHECK(load.imbalance(0) == 1.0);        // pooled: even, though each run was 3 : 1 (1.5)
  CHECK(std::isnan(load.imbalance(1)));   // routed nothing
  CHECK(runs[0].expert_load.imbalance(0) == 1.5);
}

TEST_CASE("analysis: CSV has the configuration columns, counts and every metric column") {
  const auto rows = an::aggregate({run("ddp", 64, {1, 2, 3})}, 1);
  std::ostringstream out;
  an::write_csv(out, rows);
  std::string header, line;
  std::istringstream in(out.str());
  std::getline(in, header);
  std::getline(in, line);
  CHECK(header.rfind("strategy,dp,pp,tp,cp,ep,world_size,", 0) == 0);
  CHECK(header.find(",runs,incomplete_runs,steps_used,step_time_s_median,") != std::string::npos);
  const auto commas = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
  CHECK(commas(header) == commas(line));
  CHECK(line.find(",1,0,2,2.5,2,3,") != std::string::npos);
}
