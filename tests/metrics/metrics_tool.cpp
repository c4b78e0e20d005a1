// Test driver for the result file (own main: MPI_Init, no Catch2). Modes:
//   write FILE --steps N --flush-every K [--ready-file F] [--export JSON]   (under mpiexec)
//       Writes N steps of known values + trace events through Recorder and ResultWriter.
//       Without --ready-file: finish(), then rank 0 checks the file (and the export).
//       With --ready-file: after the loop (no finish), rank 0 writes every rank's pid to F and
//       all ranks sleep until killed (the SIGKILL test).
//   check FILE --world W --steps S --complete 0|1     (serial) every contracted path and value
//   export FILE JSON --world W --steps S               (serial) Perfetto export + its checks
//   reject FILE DIR                                    (serial) foreign/truncated files -> UserError
//   errors DIR                                         (under mpiexec) writer misuse -> UserError
//                                                      on every rank, no hang
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "hlp/version.h"
#include "metrics/h5_util.h"
#include "metrics/result_reader.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"
#include "metrics/trace_export.h"

namespace m = hlp::metrics;
namespace schema = hlp::metrics::schema;
using nlohmann::json;

namespace {

int g_failures = 0;
#define EXPECT(...)                                                                     \
  do {                                                                                  \
    if (!(__VA_ARGS__)) {                                                               \
      ++g_failures;                                                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << ": EXPECT failed: " #__VA_ARGS__ "\n"; \
    }                                                                                   \
  } while (0)

const char* kConfig = "[run]\nstrategy = ddp\nsteps = 12\n\n[model]\npreset = tiny\n";
const char* kExtraMetric = "custom_widgets";

// The value every rank writes for metric index i at step s: distinct per (rank, step, metric).
double known_value(int rank, int64_t step, size_t metric_index) {
  return rank * 1000.0 + static_cast<double>(step) + static_cast<double>(metric_index) / 100.0;
}
int64_t allreduce_bytes(int rank, int64_t step) { return 1000 * (rank + 1) + step; }

std::string arg_value(int argc, char** argv, const std::string& flag, const std::string& dflt) {
  for (int i = 0; i + 1 < argc; ++i)
    if (flag == argv[i]) return argv[i + 1];
  return dflt;
}

// ---------------------------------------------------------------------------------------------
int check_file(const std::string& path, int world, int64_t steps, int complete);
int check_export(const std::string& path, const std::string& json_path, int world, int64_t steps);

int run_write(int argc, char** argv) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string path = argv[2];
  const int64_t steps = std::stoll(arg_value(argc, argv, "--steps", "6"));
  const int flush_every = std::stoi(arg_value(argc, argv, "--flush-every", "2"));
  const std::string ready_file = arg_value(argc, argv, "--ready-file", "");
  const std::string export_json = arg_value(argc, argv, "--export", "");

  m::Recorder rec(rank);
  rec.align_clocks(MPI_COMM_WORLD);
  m::RunInfo info;
  info.strategy = "ddp";
  info.backend = "mpi";
  info.device = "cpu";
  info.mesh = {world, 1, 1};
  info.config_ini = kConfig;
  info.libtorch_version = "test-no-torch";
  info.threads_per_rank = 1;
  info.peak_flops_per_device = 1.5e11;
  info.peak_flops_source = "test value";
  info.clock = rec.clock();
  m::WriterOptions opt;
  opt.flush_every_steps = flush_every;
  opt.extra_metrics = {kExtraMetric};
  m::ResultWriter writer(MPI_COMM_WORLD, path, info, opt);

  m::ModelInfo model;
  model.name = "tiny";
  model.pattern = "GGGAGGGS";
  model.params_total = 7400000;
  model.params_trainable = 65536;
  model.flops_per_token = 4.5e7;
  model.flops_per_token_executed = 3.1e7;
  writer.write_model(model, 7400000 / world + rank);

  m::PipelineInfo pipe;
  pipe.stage_first_layer = {0, 4};
  pipe.stage_cost = {1.5, 2.5};
  pipe.stage_cost_measured_s = {0.01, 0.02};
  pipe.bubble_fraction = 0.3;
  pipe.bubble_fraction_theory = 0.2;
  pipe.schedule = "1f1b";
  pipe.split = "balanced";
  pipe.micro_batches = 4;
  writer.write_pipeline(pipe);

  for (int64_t step = 0; step < steps; ++step) {
    rec.begin_step(step);
    {
      auto data = rec.span("data_wait", m::Lane::Data, step);
    }
    auto whole = rec.span("step", m::Lane::Compute, step, -1, "step");
    const double t_a = hlp::now_s();
    for (int micro = 0; micro < 2; ++micro) {
      { auto f = rec.span("forward", m::Lane::Compute, step, micro); }
      { auto b = rec.span("backward", m::Lane::Compute, step, micro); }
    }
    const double t_b = hlp::now_s();
    // An all-reduce "overlapped" with the backward passes; at step 0 also an all-gather that
    // starts inside it and ends after it (partial overlap: the exporter must move it to tid 4).
    rec.on_comm_op({hlp::comm::OpKind::AllReduce, allreduce_bytes(rank, step), t_a, t_b, world,
                    -1, true});
    if (step == 0)
      rec.on_comm_op({hlp::comm::OpKind::AllGather, 64, 0.5 * (t_a + t_b), hlp::now_s() + 1e-6,
                      world, -1, true});
    whole.end();
    m::StepMetrics values;
    for (size_t i = 0; i < schema::kStepMetrics.size(); ++i) {
      if (std::string(schema::kStepMetrics[i]) == schema::kStepEnd) continue;  // recorder's
      values[schema::kStepMetrics[i]] = known_value(rank, step, i);
    }
    values[kExtraMetric] = known_value(rank, step, 99);
    rec.record_step(step, values);
    writer.append(rec);  // collective; flushes every flush_every steps
  }

  if (!ready_file.empty()) {
    // Simulate a job killed mid-run: nothing after the last automatic flush reaches the file.
    const int pid = static_cast<int>(getpid());
    std::vector<int> pids(static_cast<size_t>(world));
    MPI_Gather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::ofstream out(ready_file + ".tmp");
      for (int p : pids) out << p << "\n";
      out.close();
      std::filesystem::rename(ready_file + ".tmp", ready_file);
    }
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  writer.finish();
  MPI_Barrier(MPI_COMM_WORLD);
  int failures = 0;
  if (rank == 0) {
    failures = check_file(path, world, steps, 1);
    if (!export_json.empty()) failures += check_export(path, export_json, world, steps);
  }
  MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
int check_file(const std::string& path, int world, int64_t steps, int complete) {
  m::ResultReader r(path);
  // root attributes
  EXPECT(r.schema_version() == schema::kSchemaVersion);
  EXPECT(r.complete() == (complete == 1));
  EXPECT(r.attr_int(schema::kAttrComplete) == complete);
  EXPECT(r.world_size() == world);
  EXPECT(r.attr_string(schema::kAttrHlpVersion) == hlp::kVersion);
  EXPECT(r.attr_string(schema::kAttrGitCommit) == hlp::kGitCommit);
  EXPECT(r.attr_string(schema::kAttrStrategy) == "ddp");
  EXPECT(r.attr_string(schema::kAttrBackend) == "mpi");
  EXPECT(r.attr_string(schema::kAttrDevice) == "cpu");
  EXPECT(r.attr_string(schema::kAttrConfig) == kConfig);
  EXPECT((r.attr_ints(schema::kAttrMesh) == std::vector<int64_t>{world, 1, 1}));
  const std::string hosts = r.attr_string(schema::kAttrHosts);
  EXPECT(std::count(hosts.begin(), hosts.end(), ',') == world - 1);
  for (const char* a : {schema::kAttrSlurmJobId, schema::kAttrSlurmArrayJobId,
                        schema::kAttrSlurmArrayTaskId})
    EXPECT(r.has_attr(a));
  const char* job = std::getenv("SLURM_JOB_ID");
  EXPECT(r.attr_string(schema::kAttrSlurmJobId) == (job ? job : ""));
  EXPECT(r.attr_string(schema::kAttrTorchVersion) == "test-no-torch");
  EXPECT(r.attr_string(schema::kAttrMpiVersion).find("MPICH") != std::string::npos);
  EXPECT(r.attr_string(schema::kAttrHdf5Version).rfind("1.", 0) == 0);
  const std::string start = r.attr_string(schema::kAttrStartTime);
  EXPECT(start.size() == 20 && start[4] == '-' && start[10] == 'T' && start.back() == 'Z');
  EXPECT(r.attr_string(schema::kAttrEndTime).empty() == (complete == 0));
  EXPECT(r.attr_double(schema::kAttrStartUnixS) > 1.6e9);
  EXPECT(r.attr_int(schema::kAttrThreadsPerRank) == 1);
  EXPECT(r.attr_double(schema::kAttrPeakFlopsPerDevice) == 1.5e11);
  EXPECT(r.attr_string(schema::kAttrPeakFlopsSource) == "test value");
  EXPECT(r.attr_int(schema::kAttrFlushEvery) > 0);
  const auto offsets = r.attr_doubles(schema::kAttrClockOffsetS);
  const auto rtts = r.attr_doubles(schema::kAttrClockRttS);
  EXPECT(offsets.size() == static_cast<size_t>(world) && rtts.size() == offsets.size());
  EXPECT(offsets.at(0) == 0.0);
  for (size_t i = 1; i < offsets.size() && i < rtts.size(); ++i) {
    // One host, one steady clock: the true offset is 0 and the estimate is within rtt / 2.
    EXPECT(rtts[i] > 0.0);
    EXPECT(std::fabs(offsets[i]) <= rtts[i] / 2 + 1e-9);
  }
  const m::RunInfo info = r.run_info();
  EXPECT(info.strategy == "ddp" && info.mesh[0] == world && info.config_ini == kConfig);

  // /steps
  EXPECT(r.num_steps() == steps);
  const auto numbers = r.step_numbers();
  EXPECT(static_cast<int64_t>(numbers.size()) == steps);
  for (int64_t s = 0; s < static_cast<int64_t>(numbers.size()); ++s) EXPECT(numbers[s] == s);
  for (size_t i = 0; i < schema::kStepMetrics.size(); ++i) {
    const std::string name = schema::kStepMetrics[i];
    EXPECT(r.has_step_metric(name));
    const m::StepMatrix mat = r.steps(name);
    EXPECT(mat.ranks == world && mat.steps == steps);
    for (int rank = 0; rank < mat.ranks; ++rank) {
      for (int64_t s = 0; s < mat.steps; ++s) {
        if (name == schema::kStepEnd) {  // stamped by the recorder: increasing run times
          EXPECT(std::isfinite(mat.at(rank, s)) && mat.at(rank, s) >= 0.0);
          if (s > 0) EXPECT(mat.at(rank, s) > mat.at(rank, s - 1));
        } else {
          EXPECT(mat.at(rank, s) == known_value(rank, s, i));
        }
      }
    }
  }
  EXPECT(r.has_step_metric(kExtraMetric));
  if (steps > 0)
    EXPECT(r.steps(kExtraMetric).at(world - 1, steps - 1) == known_value(world - 1, steps - 1, 99));
  const auto listed = r.step_metrics();
  EXPECT(listed.size() == schema::kStepMetrics.size() + 1);

  // /model
  const auto model = r.model();
  EXPECT(model.has_value());
  if (model) {
    EXPECT(model->name == "tiny" && model->pattern == "GGGAGGGS");
    EXPECT(model->params_total == 7400000 && model->params_trainable == 65536);
    EXPECT(model->flops_per_token == 4.5e7 && model->flops_per_token_executed == 3.1e7);
    EXPECT(!model->flops_convention.empty());
    EXPECT(model->params_per_rank.size() == static_cast<size_t>(world));
    for (int rank = 0; rank < world && rank < static_cast<int>(model->params_per_rank.size()); ++rank)
      EXPECT(model->params_per_rank[rank] == 7400000 / world + rank);
  }
  // /pipeline
  const auto pipe = r.pipeline();
  EXPECT(pipe.has_value());
  if (pipe) {
    EXPECT((pipe->stage_first_layer == std::vector<int64_t>{0, 4}));
    EXPECT((pipe->stage_cost == std::vector<double>{1.5, 2.5}));
    EXPECT((pipe->stage_cost_measured_s == std::vector<double>{0.01, 0.02}));
    EXPECT(pipe->bubble_fraction == 0.3 && pipe->bubble_fraction_theory == 0.2);
    EXPECT(pipe->schedule == "1f1b" && pipe->split == "balanced" && pipe->micro_batches == 4);
  }

  // /summary: only after finish(). Steps 1..S-1 are used; rank r's median of metric i is
  // r*1000 + median(1..S-1) + i/100, the max over ranks is the last rank's.
  const auto sum = r.summary();
  EXPECT(sum.has_value() == (complete == 1));
  if (sum && steps >= 2) {
    EXPECT(sum->skip_steps == 1 && sum->steps_used == steps - 1);
    const double median_step = 0.5 * (1 + (steps - 1));
    for (size_t i = 0; i < schema::kStepMetrics.size(); ++i) {
      const std::string name = schema::kStepMetrics[i];
      if (name == schema::kStepEnd) continue;
      const auto& per_rank = sum->median_per_rank.at(name);
      EXPECT(per_rank.size() == static_cast<size_t>(world));
      for (int rank = 0; rank < world && rank < static_cast<int>(per_rank.size()); ++rank)
        EXPECT(std::fabs(per_rank[rank] - known_value(rank, 0, i) - median_step) < 1e-9);
      EXPECT(std::fabs(sum->median_max_over_ranks.at(name) - known_value(world - 1, 0, i) -
                       median_step) < 1e-9);
    }
    EXPECT(sum->median_per_rank.count(kExtraMetric) == 1);
  }

  // /trace/rank<N>: per step 5 compute + 1 data + 1 comm, plus one extra comm op at step 0.
  for (int rank = 0; rank < world; ++rank) {
    const auto events = r.trace(rank);
    EXPECT(static_cast<int64_t>(events.size()) == (steps > 0 ? 7 * steps + 1 : 0));
    std::map<std::string, int64_t> by_name;
    for (const auto& e : events) {
      by_name[e.name]++;
      EXPECT(e.end_s >= e.start_s && e.start_s >= 0.0);
      EXPECT(e.step >= 0 && e.step < steps);
      if (e.name == "all_reduce") {
        EXPECT(e.lane == m::Lane::Comm && e.category == "comm");
        EXPECT(e.bytes == allreduce_bytes(rank, e.step));
      }
      if (e.name == "forward" || e.name == "backward")
        EXPECT(e.lane == m::Lane::Compute && (e.micro_batch == 0 || e.micro_batch == 1));
      if (e.name == "data_wait") EXPECT(e.lane == m::Lane::Data);
      if (e.name == "step") EXPECT(e.category == "step");
    }
    EXPECT(by_name["forward"] == 2 * steps && by_name["backward"] == 2 * steps);
    EXPECT(by_name["step"] == steps && by_name["data_wait"] == steps);
    EXPECT(by_name["all_reduce"] == steps && by_name["all_gather"] == (steps > 0 ? 1 : 0));
  }
  std::cout << "check " << path << ": " << (g_failures ? "FAILED" : "ok") << " (" << world
            << " ranks, " << steps << " steps, complete=" << complete << ")\n";
  return g_failures;
}

// ---------------------------------------------------------------------------------------------
int check_export(const std::string& path, const std::string& json_path, int world, int64_t steps) {
  const m::TraceExportStats stats = m::export_chrome_trace(path, json_path);
  std::ifstream in(json_path);
  json doc;
  try {
    doc = json::parse(in);  // throws on invalid JSON
  } catch (const std::exception& e) {
    std::cerr << "invalid JSON in " << json_path << ": " << e.what() << "\n";
    return 1;
  }
  EXPECT(doc.is_object() && doc["traceEvents"].is_array());
  EXPECT(doc["displayTimeUnit"] == "ms");
  // per (pid, tid): X events [ts, end]
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
  std::map<std::pair<int, int>, int> thread_names;
  std::map<int, int> process_names, counters;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    const int pid = e.at("pid");
    EXPECT(pid >= 0 && pid < world);
    if (ph == "X") {
      const double ts = e.at("ts"), dur = e.at("dur");
      EXPECT(dur >= 0.0 && e.contains("name") && e.contains("cat"));
      lanes[{pid, e.at("tid").get<int>()}].push_back({ts, ts + dur});
    } else if (ph == "M") {
      if (e.at("name") == "process_name") process_names[pid]++;
      if (e.at("name") == "thread_name") thread_names[{pid, e.at("tid").get<int>()}]++;
    } else if (ph == "C") {
      EXPECT(e.at("name") == "memory");
      EXPECT(e.at("args").contains("current_bytes") && e.at("args").contains("peak_bytes"));
      counters[pid]++;
    }
  }
  for (int pid = 0; pid < world; ++pid) {
    EXPECT(process_names[pid] == 1);
    EXPECT(counters[pid] == steps);
    EXPECT(lanes[{pid, 0}].size() == static_cast<size_t>(5 * steps));  // compute
    EXPECT(lanes[{pid, 1}].size() == static_cast<size_t>(steps));      // comm: all-reduces
    EXPECT(lanes[{pid, 2}].size() == static_cast<size_t>(steps));      // data
    EXPECT(lanes[{pid, 4}].size() == 1u);  // the overlapping all-gather: comm overflow tid
    for (int tid : {0, 1, 2, 4}) EXPECT(thread_names[{pid, tid}] == 1);
  }
  EXPECT(stats.complete_events == world * (7 * steps + 1));
  EXPECT(stats.counter_events == world * steps);
  EXPECT(stats.overflow_tids == world);
  // Perfect nesting on every tid: sorted by start, each event lies inside the open parent or
  // starts after it ended.
  const double eps = 1e-6;  // µs
  for (auto& [key, spans] : lanes) {
    std::sort(spans.begin(), spans.end(),
              [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open;
    for (const auto& [start, end] : spans) {
      while (!open.empty() && open.back() <= start + eps) open.pop_back();
      if (!open.empty()) EXPECT(end <= open.back() + eps);
      open.push_back(end);
    }
  }
  std::cout << "export " << json_path << ": " << (g_failures ? "FAILED" : "ok") << " ("
            << stats.complete_events << " X, " << stats.counter_events << " C)\n";
  return g_failures;
}

// ---------------------------------------------------------------------------------------------
template <typename F>
void expect_user_error(F&& f, const std::string& needle) {
  try {
    f();
    ++g_failures;
    std::cerr << "expected hlp::UserError containing '" << needle << "', nothing thrown\n";
  } catch (const hlp::UserError& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      ++g_failures;
      std::cerr << "UserError '" << e.what() << "' lacks '" << needle << "'\n";
    }
  }
}

int run_reject(const std::string& good, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // 1. a foreign HDF5 file
  const std::string foreign = dir + "/foreign.h5";
  {
    hid_t f = H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(f);
  }
  expect_user_error([&] { m::ResultReader r(foreign); },
                    "not an HLP result file (no hlp_schema_version attribute)");
  // 2. the good file cut in half (a copy killed mid-transfer)
  const std::string truncated = dir + "/truncated.h5";
  fs::copy_file(good, truncated, fs::copy_options::overwrite_existing);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  expect_user_error([&] { m::ResultReader r(truncated); }, "truncated");
  // 3. not HDF5 at all; 4. missing
  const std::string text = dir + "/notes.h5";
  std::ofstream(text) << "this is not HDF5\n";
  expect_user_error([&] { m::ResultReader r(text); }, "not an HDF5 file");
  expect_user_error([&] { m::ResultReader r(dir + "/missing.h5"); }, "does not exist");
  // 5. export of a bad input fails the same way
  expect_user_error([&] { m::export_chrome_trace(foreign, dir + "/x.json"); },
                    "not an HLP result file");
  // 6. the good one still opens, and asking for what is not there is a UserError too
  m::ResultReader r(good);
  expect_user_error([&] { r.steps("no_such_metric"); }, "no step metric 'no_such_metric'");
  expect_user_error([&] { r.trace(r.world_size()); }, "out of range");
  std::cout << "reject: " << (g_failures ? "FAILED" : "ok") << "\n";
  return g_failures;
}

// Each misuse must raise hlp::UserError on every rank (a rank left waiting would hang the job).
int run_errors(const std::string& dir) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  m::RunInfo info;
  auto expect_everywhere = [&](const char* what, auto&& f, const std::string& needle) {
    expect_user_error(f, rank == 0 ? needle : std::string());
    MPI_Barrier(MPI_COMM_WORLD);  // reached only if no rank hung
    if (rank == 0) std::cout << "errors: " << what << " -> UserError on every rank\n";
  };
  // 1. an unknown metric name on one rank only
  expect_everywhere("unknown metric on rank 0", [&] {
    m::ResultWriter w(MPI_COMM_WORLD, dir + "/unknown_metric.h5", info);
    m::StepMetrics v{{schema::kLoss, 1.0}};
    if (rank == 0) v["bogus_metric"] = 2.0;
    w.append_step({0, v});
    w.flush();
  }, "unknown step metric 'bogus_metric'");
  // 2. ranks out of step: rank 0 buffered one step more
  expect_everywhere("different step counts", [&] {
    m::ResultWriter w(MPI_COMM_WORLD, dir + "/out_of_step.h5", info);
    w.append_step({0, {{schema::kLoss, 1.0}}});
    if (rank == 0) w.append_step({1, {{schema::kLoss, 1.0}}});
    w.flush();
  }, "ranks buffered different numbers of steps");
  // 3. a path that cannot be created (a regular file where a directory should be)
  if (rank == 0) std::ofstream(dir + "/plain_file") << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  expect_everywhere("unwritable path", [&] {
    m::ResultWriter w(MPI_COMM_WORLD, dir + "/plain_file/sub/result.h5", info);
  }, "cannot create directory");
  // 4. a bad extra metric name is refused before any collective call
  expect_everywhere("bad extra metric name", [&] {
    m::WriterOptions o;
    o.extra_metrics = {"a/b"};
    m::ResultWriter w(MPI_COMM_WORLD, dir + "/bad_extra.h5", info, o);
  }, "not usable as an HDF5 dataset name");
  int failures = g_failures, total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: metrics_tool write|check|export|reject FILE ...\n";
    return 2;
  }
  const std::string mode = argv[1];
  int rc = 0;
  MPI_Init(&argc, &argv);
  try {
    if (mode == "write") {
      rc = run_write(argc, argv);
    } else if (mode == "check") {
      rc = check_file(argv[2], std::stoi(arg_value(argc, argv, "--world", "1")),
                      std::stoll(arg_value(argc, argv, "--steps", "0")),
                      std::stoi(arg_value(argc, argv, "--complete", "1"))) ? 1 : 0;
    } else if (mode == "export" && argc >= 4) {
      rc = check_export(argv[2], argv[3], std::stoi(arg_value(argc, argv, "--world", "1")),
                        std::stoll(arg_value(argc, argv, "--steps", "0"))) ? 1 : 0;
    } else if (mode == "errors") {
      std::filesystem::create_directories(argv[2]);
      rc = run_errors(argv[2]) ? 1 : 0;
    } else if (mode == "reject" && argc >= 4) {
      rc = run_reject(argv[2], argv[3]) ? 1 : 0;
    } else {
      std::cerr << "unknown mode '" << mode << "'\n";
      rc = 2;
    }
  } catch (const hlp::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
