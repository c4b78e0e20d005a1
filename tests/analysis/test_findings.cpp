// Unit tests of the report's Findings, headline table and cost section on in-memory runs:
// the tie rule (interquartile ranges overlap), the Pareto front, reason lines generated from
// the breakdown, competitor labels, scaling efficiency against single, LaTeX escaping and the
// service-unit arithmetic.
#include "catch_compat.h"

#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "analysis/aggregate.h"
#include "analysis/findings.h"
#include "analysis/headline.h"
#include "analysis/report.h"
#include "analysis/run_loader.h"
#include "metrics/schema.h"

namespace an = hlp::analysis;
namespace schema = hlp::metrics::schema;

namespace {

// A run of `strategy` at T 64 on `ranks` ranks, step 0 = warm-up; every step's phases are
// forward 0.2 s, backward 0.4 s and `comm` s exposed communication.
an::RunData run(const std::string& strategy, int64_t ranks, std::vector<double> tokens,
                double peak, double comm = 0.0, double activations = 500) {
  an::RunData r;
  r.path = strategy + std::to_string(ranks) + ".h5";
  r.complete = true;
  r.wall_s = 3600.0;
  for (const auto& c : an::config_columns()) r.config[c] = "x";
  r.config["strategy"] = strategy;
  r.config["seq_len"] = "64";
  r.config["global_batch"] = "4";
  r.config["world_size"] = std::to_string(ranks);
  r.config["pp"] = "1";
  for (const char* c : {"pp_split", "pp_schedule", "pp_virtual"}) r.config[c] = "-";  // as loaded
  r.config["device"] = "cpu";
  const size_t n = tokens.size();
  for (size_t i = 0; i < n; ++i) r.step_numbers.push_back(int64_t(i));
  r.per_step[schema::kTokensPerS] = tokens;
  r.per_step[schema::kPeakBytes] = std::vector<double>(n, peak);
  r.per_step[schema::kForward] = std::vector<double>(n, 0.2);
  r.per_step[schema::kBackward] = std::vector<double>(n, 0.4);
  r.per_step[schema::kCommExposed] = std::vector<double>(n, comm);
  r.per_step[schema::kStepTime] = std::vector<double>(n, 0.6 + comm);
  r.per_step[schema::kActivationBytes] = std::vector<double>(n, activations);
  r.per_step[schema::kParamBytes] = std::vector<double>(n, peak - activations);
  return r;
}

const an::ConfigRow& row(const std::vector<an::ConfigRow>& rows, const std::string& strategy) {
  for (const auto& r : rows)
    if (r.value("strategy") == strategy) return r;
  throw std::runtime_error("no row " + strategy);
}

}  // namespace

TEST_CASE("a tie is a difference within the step-to-step spread", "[findings]") {
  // ddp: median 1020, IQR [1000, 1050]; fsdp2: 1040, [1010, 1060] -> overlap; fsdp: far below
  const auto rows = an::aggregate({run("ddp", 2, {1, 1000, 1100, 950, 1050, 1020}, 3000),
                                   run("fsdp2", 2, {1, 1010, 1080, 960, 1040, 1060}, 2000),
                                   run("fsdp", 2, {1, 500, 520, 510, 530, 505}, 1500)},
                                  1);
  CHECK(an::throughput_tie(row(rows, "ddp"), row(rows, "fsdp2")));
  CHECK_FALSE(an::throughput_tie(row(rows, "ddp"), row(rows, "fsdp")));
  CHECK_FALSE(an::memory_tie(row(rows, "ddp"), row(rows, "fsdp2")));  // constant peaks differ
  CHECK(an::tokens_per_device(row(rows, "fsdp2")) == Approx(520.0));
  std::ostringstream md;
  an::write_findings(md, rows, {});
  CHECK(md.str().find("Fastest: **tie** between **fsdp2** (520 tok/s per device) and **ddp** "
                      "(510 tok/s per device)") != std::string::npos);
  CHECK(md.str().find("Least memory: **fsdp** (1.5 KiB), 25.0 % less than **fsdp2** (2.0 KiB)") !=
        std::string::npos);
  // two values that differ but whose spreads do not overlap are ranked, not tied
  const auto apart = an::aggregate({run("ddp", 2, {1, 1000, 1001, 1002}, 10),
                                    run("fsdp2", 2, {1, 1003, 1004, 1005}, 10)},
                                   1);
  CHECK_FALSE(an::throughput_tie(apart[0], apart[1]));
}

TEST_CASE("the Pareto front keeps what nothing beats in both throughput and memory", "[findings]") {
  const auto rows = an::aggregate({run("ddp", 2, {1, 1000, 1000}, 3000),    // fastest
                                   run("fsdp2", 2, {1, 800, 800}, 2000),    // between
                                   run("fsdp", 2, {1, 700, 700}, 2500),     // dominated by fsdp2
                                   run("tp", 2, {1, 400, 400}, 1000)},      // leanest
                                  1);
  std::vector<const an::ConfigRow*> all;
  for (const auto& r : rows) all.push_back(&r);
  std::set<std::string> front;
  for (const auto* r : an::pareto_front(all)) front.insert(r->value("strategy"));
  CHECK(front == std::set<std::string>{"ddp", "fsdp2", "tp"});
  std::ostringstream md;
  an::write_findings(md, rows, {{"tp-n8", "left out before submission: predicted 91 GiB"}});
  CHECK(md.str().find("Pareto front (tokens/s per device against peak memory per device): ddp, "
                      "fsdp2, tp; dominated: fsdp") != std::string::npos);
  CHECK(md.str().find("- `tp-n8`: left out before submission") != std::string::npos);
}

TEST_CASE("reason lines are generated from each configuration's breakdown", "[findings]") {
  // fsdp2 spends 0.4 s per step more in exposed communication and holds 1000 B more activations
  const auto rows = an::aggregate({run("ddp", 2, {1, 1000, 1000}, 3000, 0.0, 2000),
                                   run("fsdp2", 2, {1, 600, 600}, 4000, 0.4, 3000)},
                                  1);
  const auto groups = an::comparable_groups(rows);
  REQUIRE(groups.size() == 1);
  const auto fsdp2 = an::reason_line(row(rows, "fsdp2"), groups[0]);
  CHECK(fsdp2.find("40 % fewer tokens/s per device than ddp, its step 400.0 ms longer (+67 %): exposed communication +400.0 ms "
                   "(40 % of its step vs 0 %)") != std::string::npos);
  CHECK(fsdp2.find("peak 3.9 KiB, +1000 B (+33 %) over ddp: activations +1000 B") != std::string::npos);
  const auto ddp = an::reason_line(row(rows, "ddp"), groups[0]);
  CHECK(ddp.find("fastest: its step is backward 67 %, forward 33 %") != std::string::npos);
  CHECK(ddp.find("leanest, peak 2.9 KiB = activations 67 %, parameters 33 %") != std::string::npos);
}

TEST_CASE("groups, labels and the headline table", "[findings]") {
  auto a = run("pp", 2, {1, 900, 900}, 100);
  a.config["pp"] = "2";
  a.config["pp_split"] = "uniform";
  auto b = a;
  b.path = "pp-balanced.h5";
  b.config["pp_split"] = "balanced";
  auto single = run("single", 1, {1, 1000, 1000}, 200);
  auto other_t = run("ddp", 2, {1, 1500, 1500}, 200);
  other_t.config["seq_len"] = "128";
  const auto rows = an::aggregate({a, b, single, run("ddp", 2, {1, 1600, 1600}, 200), other_t}, 1);
  const auto groups = an::comparable_groups(rows);
  REQUIRE(groups.size() == 3);  // T 64 n 1, T 64 n 2, T 128 n 2: context, then ranks
  CHECK(groups[0].rows.size() == 1);
  CHECK(groups[1].rows.size() == 3);
  CHECK(an::competitor_label(row(rows, "ddp"), groups[1]) == "ddp");
  CHECK(an::competitor_label(*groups[1].rows[1], groups[1]).rfind("pp (pp_split ", 0) == 0);
  const auto head = an::headline_rows(rows);
  REQUIRE(head.size() == 5);
  CHECK(head[1].strategy == "ddp");  // fastest first in its group
  CHECK(head[1].scaling_efficiency == Approx(1600.0 / (2 * 1000.0)));
  CHECK(std::isnan(head[4].scaling_efficiency));  // no single at T 128
  std::ostringstream tex;
  an::write_headline_latex(tex, head);
  CHECK(tex.str().find("\\begin{tabular}{lrrrrrrrr}") != std::string::npos);
  CHECK(tex.str().find("pp (pp\\_split uniform)") != std::string::npos);
  CHECK(an::latex_escape("a_b%c&d#e$f{g}~^\\") ==
        "a\\_b\\%c\\&d\\#e\\$f\\{g\\}\\textasciitilde{}\\textasciicircum{}\\textbackslash{}");
}

TEST_CASE("cost: device-hours from the runs' wall time, service units at the rate", "[findings]") {
  auto gpu = run("ddp", 4, {1, 100, 100}, 10);  // 1 h wall on 4 GPUs: 4 GPU-hours
  gpu.config["device"] = "cuda:H100";
  auto rerun = gpu;
  rerun.path = "rerun.h5";
  rerun.wall_s = 1800.0;  // +2 GPU-hours
  const auto rows = an::aggregate({gpu, rerun}, 1);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].device_hours == Approx(6.0));
  std::ostringstream md;
  an::write_cost(md, rows, 2.5);
  CHECK(md.str().find("| ddp n=4 T 64 | 2 | 6.0000 | 15.000 |") != std::string::npos);
  CHECK(md.str().find("| **total** | | **6.0000** | **15.000** |") != std::string::npos);
  auto killed = gpu;
  killed.wall_s = std::nan("");  // no end time: not counted, shown as "–"
  const auto partial = an::aggregate({killed}, 1);
  CHECK(std::isnan(partial[0].device_hours));
}
