// Writes result files with KNOWN values through the real ResultWriter, for the table / report
// tests (check_table.py holds the expected numbers; keep both in sync), and many small files
// for the 1,000-file benchmark. Run under `mpiexec -n 2`.
//   write_fixtures known DIR          the known-value set (2-rank files, a 1-rank file via
//                                     MPI_COMM_SELF, pipeline files, one of them with hand-placed
//                                     forward/backward trace spans, one incomplete file, one
//                                     MoE file with expert parallelism and /experts, context-
//                                     parallel files: three pairs of cp schemes at cp 2, T 64
//                                     and 128, and an older cp 4 file)
//   write_fixtures many DIR N         N small 1-rank files (rank r writes every r-th), 8 steps
//   write_fixtures tie DIR            the Findings set: at T 64 ddp and fsdp2 differ by less than
//                                     their step-to-step spread (a tie), fsdp is slower and leaner;
//                                     at T 128 ddp is clearly faster than fsdp2
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"

namespace m = hlp::metrics;
namespace schema = hlp::metrics::schema;

namespace {

struct Spec {
  std::string path;
  std::string strategy = "ddp";
  std::array<int64_t, 3> mesh{2, 1, 1};
  // mesh_axes dp,pp,tp,cp,ep and their sizes; empty: not written (files before 2026-11-26)
  std::vector<int64_t> mesh_sizes;
  std::string model = "tiny", pattern = "GGAS";
  // context parallelism: cp = N in the INI when above 1; the scheme lines only when given
  // (cp-layout with cp-scheme), as files before those options lack them
  int64_t cp = 1;
  std::string cp_scheme, cp_attention;
  int64_t seq_len = 64;
  int64_t seed = 1;
  std::string pp_split = "balanced";
  int64_t micro_batches = 0;
  // metric -> [rank][step]; a metric given for one rank only is used for every rank.
  std::map<std::string, std::vector<std::vector<double>>> values;
  bool finish = true;
  bool pipeline = false;
  double bubble = 0.0, bubble_theory = 0.0;
  std::vector<std::vector<m::TraceEvent>> events;  // [rank]: this rank's trace (none if empty)
  std::vector<std::string> extra_metrics;            // declared beyond schema::kStepMetrics
  std::optional<m::ExpertsInfo> experts;             // /experts (sparse MoE layers)
};

std::string config_ini(const Spec& s) {
  std::string cp;
  if (s.cp > 1) cp += "\ncp = " + std::to_string(s.cp);
  if (!s.cp_scheme.empty()) cp += "\ncp-layout = zigzag\ncp-scheme = " + s.cp_scheme;
  if (!s.cp_attention.empty()) cp += "\ncp-attention = " + s.cp_attention;
  return "# test configuration\nstrategy = " + s.strategy + "\ntp = " + std::to_string(s.mesh[2]) +
         "\npp = " + std::to_string(s.mesh[1]) + cp + "\npp-split = " + s.pp_split +
         "\npp-schedule = 1f1b\nmicro-batches = " + std::to_string(s.micro_batches) +
         "\nmodel = " + s.model + "\npattern = \nlora-rank = 8\nseq-len = " + std::to_string(s.seq_len) +
         "\nmicro-batch = 2\nglobal-batch = 4\nseed = " + std::to_string(s.seed) +
         "\nprecision = fp32\nactivation-checkpointing = false\ngdn-mode = chunked\nout = " + s.path + "\n";
}

// Collective over comm.
void write(MPI_Comm comm, const Spec& s) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  m::RunInfo info;
  info.strategy = s.strategy;
  info.mesh = s.mesh;
  if (!s.mesh_sizes.empty()) {
    info.mesh_axes = {"dp", "pp", "tp", "cp", "ep"};
    info.mesh_sizes = s.mesh_sizes;
  }
  info.config_ini = config_ini(s);
  info.libtorch_version = "none";
  info.peak_flops_per_device = 1e9;
  info.peak_flops_source = "test";
  m::WriterOptions opt;
  opt.flush_every_steps = 2;
  opt.collective_writes = false;
  opt.extra_metrics = s.extra_metrics;
  m::ResultWriter w(comm, s.path, info, opt);
  m::ModelInfo model;
  model.name = s.model;
  model.pattern = s.pattern;
  model.params_total = 1000;
  model.params_trainable = 10;
  model.flops_per_token = 6000;
  model.flops_per_token_executed = 4000;
  w.write_model(model, 1000);
  size_t steps = 0;
  for (const auto& [name, per_rank] : s.values) steps = std::max(steps, per_rank.front().size());
  for (size_t step = 0; step < steps; ++step) {
    m::StepRecord row;
    row.step = static_cast<int64_t>(step);
    for (const auto& [name, per_rank] : s.values) {
      const auto& v = per_rank.size() > static_cast<size_t>(rank) ? per_rank[rank] : per_rank[0];
      row.values[name] = v[step];
    }
    w.append_step(row);
  }
  if (!s.events.empty()) w.append_events(s.events[static_cast<size_t>(rank)]);
  w.flush();
  if (s.pipeline) {
    m::PipelineInfo p;
    p.stage_first_layer = {0, 2};
    p.stage_cost = {1.0, 1.0};
    p.bubble_fraction = s.bubble;
    p.bubble_fraction_theory = s.bubble_theory;
    p.schedule = "1f1b";
    p.split = s.pp_split;
    p.micro_batches = s.micro_batches;
    w.write_pipeline(p);
  }
  if (s.experts) w.write_experts(*s.experts);
  if (s.finish) w.finish();
}

std::vector<std::vector<double>> same(std::vector<double> v) { return {v}; }

// Memory parts and MFU every known file shares.
void add_common(Spec& s, size_t steps) {
  auto c = [&](double x) { return same(std::vector<double>(steps, x)); };
  s.values[schema::kParamBytes] = c(100);
  s.values[schema::kGradBytes] = c(10);
  s.values[schema::kOptimizerBytes] = c(20);
  s.values[schema::kActivationBytes] = c(1000);
  s.values[schema::kForward] = c(0.25);
  s.values[schema::kBackward] = c(0.5);
  if (!s.values.count(schema::kLoss)) s.values[schema::kLoss] = c(2.0);
  if (!s.values.count(schema::kPeakBytes)) s.values[schema::kPeakBytes] = c(2000);
  if (!s.values.count(schema::kTokensPerS)) s.values[schema::kTokensPerS] = c(1000);
}

m::TraceEvent event(const char* name, m::Lane lane, int64_t step, int32_t micro_batch,
                    double start_s, double end_s) {
  m::TraceEvent e;
  e.name = name;
  e.category = lane == m::Lane::Compute ? "compute" : lane == m::Lane::Comm ? "comm" : "data";
  e.lane = lane;
  e.step = step;
  e.micro_batch = micro_batch;
  e.start_s = start_s;
  e.end_s = end_s;
  return e;
}

// Two stages, steps 0..3; per step the window is [min start, max end] of both stages' forward /
// backward spans and a stage's bubble is 1 - |union of its spans| / |window|:
//   step 0 (warm-up) window [0, 1]:   stage 0 busy 0.25 -> 0.75,  stage 1 busy 0.125 -> 0.875
//   step 1           window [1, 5]:   stage 0 busy 2    -> 0.5,   stage 1 busy 1.5   -> 0.625
//                    (stage 1's optimizer [5, 9], a comm and a data event are not spans)
//   step 2           window [10, 14]: stage 0 forwards [10, 11] and [10.5, 11.5] overlap:
//                    busy 1.5 + 1 = 2.5 (not 3) -> 0.375;  stage 1 busy 1.5 -> 0.625
//   step 3           stage 1 has no span: no common window, the step is left out
// Mean over stages and steps 1..3: (0.5 + 0.625 + 0.375 + 0.625) / 4 = 0.53125.
Spec pipeline_with_trace(const std::string& dir) {
  using L = m::Lane;
  Spec p;
  p.strategy = "pp";
  p.mesh = {1, 2, 1};
  p.pipeline = true;
  p.micro_batches = 2;
  p.bubble = 0.4;  // the in-process value stays apart from the trace one
  p.bubble_theory = 1.0 / 3.0;
  p.path = dir + "/pp/pp_traced_m2.h5";
  p.values[schema::kStepTime] = same({1, 4, 4, 2});
  add_common(p, 4);
  p.events = {
      {event("next_batch", L::Data, 0, -1, 0.0, 0.0),  // stage 0
       event("forward", L::Compute, 0, 0, 0.0, 0.125),
       event("backward", L::Compute, 0, 0, 0.875, 1.0),
       event("forward", L::Compute, 1, 0, 1.0, 2.0),
       event("recv", L::Comm, 1, -1, 2.0, 4.0),
       event("backward", L::Compute, 1, 0, 4.0, 5.0),
       event("forward", L::Compute, 2, 0, 10.0, 11.0),
       event("forward", L::Compute, 2, 1, 10.5, 11.5),
       event("backward", L::Compute, 2, 0, 13.0, 14.0),
       event("forward", L::Compute, 3, 0, 20.0, 21.0),
       event("backward", L::Compute, 3, 0, 21.0, 22.0)},
      {event("forward", L::Compute, 0, 0, 0.125, 0.1875),  // stage 1
       event("backward", L::Compute, 0, 0, 0.1875, 0.25),
       event("forward", L::Compute, 1, 0, 2.0, 3.0),
       event("backward", L::Compute, 1, 0, 3.0, 3.5),
       event("optimizer", L::Compute, 1, -1, 5.0, 9.0),
       event("forward", L::Compute, 2, 0, 11.5, 12.5),
       event("backward", L::Compute, 2, 0, 12.5, 13.0),
       event("optimizer", L::Compute, 3, -1, 20.0, 23.0)}};
  return p;
}

// MoE: ddp+ep2 on 2 ranks (ep carved out of dp = 2), model tiny-moe with sparse layers 1 and 3
// of E = 4 experts, top 2; 4 steps, step 0 warm-up. Each step routes 512 (token, k) slots per
// layer (global batch 4 x T 64 x top 2), mean 128 an expert:
//   step 0  layer 1 {384, 64, 32, 32} (3.0)     layer 3 {128, 128, 128, 128} (1.0)  worst 3.0
//   step 1  layer 1 {192, 128, 96, 96} (1.5)    layer 3 {160, 128, 112, 112} (1.25) worst 1.5
//   step 2  layer 1 {128, 160, 96, 128} (1.25)  layer 3 {128, 128, 128, 128} (1.0)  worst 1.25
//   step 3  layer 1 {128, 128, 128, 128} (1.0)  layer 3 {64, 256, 96, 96} (2.0)     worst 2.0
// expert_imbalance = the worst per step; check_table.py expects its median 1.5 (warm-up 1) and
// 1.75 (warm-up 0). Summed over the steps, layer 1 {832, 480, 352, 384} and layer 3
// {480, 640, 464, 464}: busiest / mean = 832 / 512 = 1.625 and 640 / 512 = 1.25, the figure
// expert_load's points (check_report.py --moe-fixture). all_to_all_bytes in MiB: rank 0
// {0, 2, 1, 3}, rank 1 {0, 1, 4, 1}: max over ranks {0, 2, 4, 3}, median 3 (warm-up 1), 2.5 (0).
Spec moe_expert_parallel(const std::string& dir) {
  constexpr double kMiB = 1024.0 * 1024.0;
  Spec s;
  s.path = dir + "/moe/ddp_ep2.h5";
  s.strategy = "ddp+ep2";
  s.mesh_sizes = {2, 1, 1, 1, 2};
  s.model = "tiny-moe";
  s.extra_metrics = {schema::kExpertImbalance, schema::kAllToAllBytes};
  s.values[schema::kStepTime] = same({3, 2, 2, 2});
  s.values[schema::kExpertImbalance] = same({3.0, 1.5, 1.25, 2.0});
  s.values[schema::kAllToAllBytes] = {{0, 2 * kMiB, 1 * kMiB, 3 * kMiB},
                                      {0, 1 * kMiB, 4 * kMiB, 1 * kMiB}};
  add_common(s, 4);
  m::ExpertsInfo e;
  e.experts = 4;
  e.top_k = 2;
  e.ep = 2;
  e.layers = {1, 3};
  e.first_step = 0;
  e.tokens = {384, 64,  32,  32,  128, 128, 128, 128,   // step 0: layer 1, layer 3
              192, 128, 96,  96,  160, 128, 112, 112,   // step 1
              128, 160, 96,  128, 128, 128, 128, 128,   // step 2
              128, 128, 128, 128, 64,  256, 96,  96};   // step 3
  // each rank routed half of every expert's slots
  e.rank_tokens = {416, 240, 176, 192, 240, 320, 232, 232,
                   416, 240, 176, 192, 240, 320, 232, 232};
  e.all_to_all_bytes = {int64_t(6 * kMiB), int64_t(6 * kMiB)};
  s.experts = e;
  return s;
}

// Context parallelism (strategy cp on the 2 ranks, tiny model), 3 steps, step 0 warm-up; the
// same on both ranks. cp 2 at T 64 and 128, one file per pair of schemes (state / attention);
// medians after warm-up 1 (of steps 1 and 2) in s, exposed = comm_exposed_s + pipeline_wait_s:
//   T 64   chain / ring           step 5   comm_exposed 0.25  pipeline_wait 2     exposed 2.25
//          allgather / ring       step 4                1     0.5                 1.5
//          alltoall / alltoall    step 3                1     0.25                1.25
//   T 128  chain / ring           step 11               0.5   4.5                 5
//          allgather / ring       step 9                2     1                   3
//          alltoall / alltoall    step 7                3     0.5                 3.5
// and one file from before --cp-scheme / --cp-attention (no scheme lines, no mesh_axes: chain /
// ring, zigzag) at cp 4, T 64: step 3, 0.25 + 1 = 1.25. hlp-analyze reads cp from the INI only,
// so a 2-rank file stands for the 4 ranks the test cannot start. check_table.py checks the
// configuration columns, check_report.py --cp-fixture these points in cp_schemes_cp2.dat and
// cp_schemes_cp4.dat.
std::vector<Spec> context_parallel(const std::string& dir) {
  struct Run {
    int64_t cp, seq_len;
    const char *scheme, *attention;
    std::vector<double> step_s, comm_exposed_s, pipeline_wait_s;
  };
  const std::vector<Run> runs = {
      {2, 64, "chain", "ring", {9, 4, 6}, {1, 0.25, 0.25}, {1, 1.5, 2.5}},
      {2, 64, "allgather", "ring", {9, 3, 5}, {1, 0.5, 1.5}, {1, 0.5, 0.5}},
      {2, 64, "alltoall", "alltoall", {9, 3, 3}, {1, 0.75, 1.25}, {1, 0.25, 0.25}},
      {2, 128, "chain", "ring", {20, 10, 12}, {1, 0.5, 0.5}, {1, 4, 5}},
      {2, 128, "allgather", "ring", {20, 8, 10}, {1, 2, 2}, {1, 1, 1}},
      {2, 128, "alltoall", "alltoall", {20, 6, 8}, {1, 2.5, 3.5}, {1, 0.5, 0.5}},
      {4, 64, "", "", {9, 2, 4}, {1, 0.25, 0.25}, {1, 1, 1}}};
  std::vector<Spec> out;
  for (const auto& r : runs) {
    Spec s;
    s.strategy = "cp";
    s.mesh = {1, 1, 1};
    if (r.cp == 2) s.mesh_sizes = {1, 1, 1, 2, 1};
    s.cp = r.cp;
    s.cp_scheme = r.scheme;
    s.cp_attention = r.attention;
    s.seq_len = r.seq_len;
    s.path = dir + "/cp/cp" + std::to_string(r.cp) + "_t" + std::to_string(r.seq_len) + "_" +
             (*r.scheme ? std::string(r.scheme) + "_" + r.attention : "old") + ".h5";
    s.values[schema::kStepTime] = same(r.step_s);
    s.values[schema::kCommExposed] = same(r.comm_exposed_s);
    s.values[schema::kPipelineWait] = same(r.pipeline_wait_s);
    add_common(s, 3);
    out.push_back(s);
  }
  return out;
}

void write_known(const std::string& dir) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // A: ddp, seq 64, 5 steps, ranks differ (max/min/mean over ranks tested).
  Spec a;
  a.path = dir + "/sub1/ddp_a.h5";
  a.values[schema::kStepTime] = {{9, 1, 3, 2, 5}, {8, 2, 1, 4, 4}};
  a.values[schema::kTokensPerS] = {{1, 100, 300, 200, 500}, {2, 150, 250, 100, 400}};
  a.values[schema::kPeakBytes] = {{5000, 1000, 1100, 1200, 1300}, {10, 1500, 900, 800, 700}};
  a.values[schema::kCommExposed] = {{1, 1, 1.5, 1, 2.5}, {0, 0.5, 0.5, 1, 1}};
  a.values[schema::kLoss] = {{4, 3, 2, 1, 0.5}, {6, 5, 4, 3, 1.5}};
  a.values[schema::kMfuModel] = {{0.5, 0.5, 0.5, 0.5, 0.5}, {0.4, 0.4, 0.4, 0.4, 0.4}};
  add_common(a, 5);
  write(MPI_COMM_WORLD, a);
  // B: a rerun of A's configuration (other seed, other path, deeper directory), 3 steps.
  Spec b;
  b.path = dir + "/sub2/deeper/ddp_b.h5";
  b.seed = 2;
  b.values[schema::kStepTime] = same({7, 6, 7});
  b.values[schema::kTokensPerS] = same({1, 50, 60});
  b.values[schema::kPeakBytes] = same({9999, 1400, 1600});
  b.values[schema::kCommExposed] = same({0, 0.6, 0.7});
  b.values[schema::kLoss] = same({3, 2, 1.5});
  b.values[schema::kMfuModel] = same({0.3, 0.3, 0.3});
  add_common(b, 3);
  write(MPI_COMM_WORLD, b);
  // C: fsdp, otherwise A's configuration.
  Spec c;
  c.path = dir + "/fsdp.h5";
  c.strategy = "fsdp";
  c.values[schema::kStepTime] = same({10, 1, 2, 3});
  add_common(c, 4);
  write(MPI_COMM_WORLD, c);
  // D: ddp at seq 128, 2 steps.
  Spec d;
  d.path = dir + "/ddp_seq128.h5";
  d.seq_len = 128;
  d.values[schema::kStepTime] = same({5, 4});
  add_common(d, 2);
  write(MPI_COMM_WORLD, d);
  // P1..P3: pipelines (pp = 2), two splits at m = 4, one more m.
  for (int i = 0; i < 3; ++i) {
    Spec p;
    p.strategy = "pp";
    p.mesh = {1, 2, 1};
    p.pipeline = true;
    p.pp_split = i == 1 ? "uniform" : "balanced";
    p.micro_batches = i == 2 ? 8 : 4;
    p.bubble = i == 0 ? 0.25 : i == 1 ? 0.3 : 0.15;
    p.bubble_theory = 1.0 / double(p.micro_batches + 1);
    p.path = dir + "/pp/pp_" + p.pp_split + "_m" + std::to_string(p.micro_batches) + ".h5";
    p.values[schema::kStepTime] = same({1, 1, 1});
    p.values[schema::kTokensPerS] = same({10, 800 + 100.0 * i, 800 + 100.0 * i});
    add_common(p, 3);
    write(MPI_COMM_WORLD, p);
  }
  // PT: pipeline (pp = 2, m = 2) whose trace has hand-placed spans; check_table.py expects
  // bubble_fraction_trace = 0.53125 (warm-up 1), 0.625 (warm-up 0), 0.5 (warm-up 2), NaN (3).
  write(MPI_COMM_WORLD, pipeline_with_trace(dir));
  // M: sparse MoE layers with expert parallelism (values above moe_expert_parallel).
  write(MPI_COMM_WORLD, moe_expert_parallel(dir));
  // CP: context parallelism, three pairs of schemes at cp 2 and an older cp 4 file (values above
  // context_parallel).
  for (const auto& s : context_parallel(dir)) write(MPI_COMM_WORLD, s);
  // I: incomplete (no finish): complete = 0.
  Spec inc;
  inc.path = dir + "/incomplete.h5";
  inc.seq_len = 256;
  inc.finish = false;
  inc.values[schema::kStepTime] = same({3, 3, 3});
  add_common(inc, 3);
  write(MPI_COMM_WORLD, inc);
  // S: a 1-rank run written by rank 0 alone (MPI_COMM_SELF).
  if (rank == 0) {
    Spec s;
    s.path = dir + "/single.h5";
    s.strategy = "single";
    s.mesh = {1, 1, 1};
    s.values[schema::kStepTime] = same({3, 2, 1});
    add_common(s, 3);
    write(MPI_COMM_SELF, s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The Findings set (check_findings.py holds the expectations). Step 0 is warm-up.
void write_tie(const std::string& dir) {
  struct Run {
    const char* name;
    const char* strategy;
    int64_t seq_len;
    std::vector<double> tokens;
    double peak;
  };
  const std::vector<Run> runs = {
      // medians after warm-up 1020 and 1040 (per device 510, 520); interquartile ranges
      // [1000, 1050] and [1010, 1060] overlap: a tie
      {"ddp_t64", "ddp", 64, {10, 1000, 1100, 950, 1050, 1020}, 3000},
      {"fsdp2_t64", "fsdp2", 64, {10, 1010, 1080, 960, 1040, 1060}, 2000},
      {"fsdp_t64", "fsdp", 64, {10, 500, 520, 510, 530, 505}, 1500},
      // 1000 vs 500 per step, no spread: ddp is 100 % faster, fsdp2 25 % leaner
      {"ddp_t128", "ddp", 128, {10, 1000, 1000, 1000, 1000, 1000}, 4000},
      {"fsdp2_t128", "fsdp2", 128, {10, 500, 500, 500, 500, 500}, 3000}};
  for (const auto& r : runs) {
    Spec s;
    s.path = dir + "/" + r.name + ".h5";
    s.strategy = r.strategy;
    s.seq_len = r.seq_len;
    s.values[schema::kTokensPerS] = same(r.tokens);
    s.values[schema::kStepTime] = same(std::vector<double>(6, 1.0));
    s.values[schema::kPeakBytes] = same(std::vector<double>(6, r.peak));
    add_common(s, 6);
    write(MPI_COMM_WORLD, s);
  }
}

// N small 1-rank files, 8 steps each, 4 strategies x seq lens x reruns.
void write_many(const std::string& dir, int n) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* strategies[] = {"single", "ddp", "fsdp", "fsdp2"};
  for (int i = rank; i < n; i += world) {
    Spec s;
    s.strategy = strategies[i % 4];
    s.mesh = {1, 1, 1};
    s.seq_len = 32 << ((i / 4) % 5);
    s.seed = i;
    s.path = dir + "/job" + std::to_string(i / 100) + "/run" + std::to_string(i) + ".h5";
    std::vector<double> t(8);
    for (int k = 0; k < 8; ++k) t[k] = 0.1 + 0.01 * ((i * 7 + k * 3) % 11);
    s.values[schema::kStepTime] = same(t);
    add_common(s, 8);
    write(MPI_COMM_SELF, s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    const std::string mode = argc > 2 ? argv[1] : "";
    if (mode == "known") write_known(argv[2]);
    else if (mode == "many" && argc > 3) write_many(argv[2], std::stoi(argv[3]));
    else if (mode == "tie") write_tie(argv[2]);
    else throw hlp::user_error("usage: write_fixtures known DIR | many DIR N | tie DIR");
  } catch (const std::exception& e) {
    std::cerr << "write_fixtures: " << e.what() << "\n";
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
