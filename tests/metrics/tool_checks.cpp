// The result-file checks of the test driver: every contracted path and value (check_file), the
// Perfetto export (check_export), and refusal of foreign / truncated / missing files (run_reject).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <hdf5.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "hlp/version.h"
#include "metrics/result_reader.h"
#include "metrics/schema.h"
#include "metrics/trace_export.h"
#include "tool_common.h"

namespace m = hlp::metrics;
namespace schema = hlp::metrics::schema;
using nlohmann::json;

namespace metrics_test {

int g_failures = 0;

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
  EXPECT(r.hosts().size() == static_cast<size_t>(world));
  EXPECT(!r.hosts().at(0).empty());
  for (const char* a : {schema::kAttrSlurmJobId, schema::kAttrSlurmArrayJobId,
                        schema::kAttrSlurmArrayTaskId})
    EXPECT(r.has_attr(a));
  const char* job = std::getenv("SLURM_JOB_ID");
  EXPECT(r.attr_string(schema::kAttrSlurmJobId) == (job ? job : ""));
  EXPECT(r.attr_string(schema::kAttrTorchVersion) == "test-no-torch");
  // The MPI this driver was built with and ran under (cmake -DHLP_MPI): its library version line.
#ifdef OMPI_MAJOR_VERSION
  const char* mpi_name = "Open MPI";
#else
  const char* mpi_name = "MPICH";
#endif
  EXPECT(r.attr_string(schema::kAttrMpiVersion).find(mpi_name) != std::string::npos);
  // the HDF5 library this process runs (was: starts with "1.", false from HDF5 2.x, Debian sid)
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);
  EXPECT(r.attr_string(schema::kAttrHdf5Version) == std::to_string(h5_major) + "." +
                                                      std::to_string(h5_minor) + "." +
                                                      std::to_string(h5_release));
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
    EXPECT((pipe->stage_cpu_measured_s == std::vector<double>{0.009, 0.015}));
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
  // A window of steps [1, 2]: no step-0 all-gather, so no overflow tid; 2 counters per rank.
  if (steps >= 3) {
    m::TraceExportOptions window;
    window.first_step = 1;
    window.last_step = 2;
    const std::string window_json = json_path + ".steps1-2.json";
    const m::TraceExportStats ws = m::export_chrome_trace(path, window_json, window);
    EXPECT(ws.complete_events == world * 7 * 2);
    EXPECT(ws.counter_events == world * 2);
    EXPECT(ws.overflow_tids == 0);
    std::ifstream win(window_json);
    const json wdoc = json::parse(win);
    for (const auto& e : wdoc["traceEvents"]) {
      if (e.at("ph") == "X") {
        const int64_t step = e.at("args").at("step");
        EXPECT(step == 1 || step == 2);
      }
    }
    m::TraceExportOptions backwards;
    backwards.first_step = 3;
    backwards.last_step = 2;
    expect_user_error([&] { m::export_chrome_trace(path, window_json, backwards); },
                      "first step 3 is after last step 2");
  }
  std::cout << "export " << json_path << ": " << (g_failures ? "FAILED" : "ok") << " ("
            << stats.complete_events << " X, " << stats.counter_events << " C)\n";
  return g_failures;
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

}  // namespace metrics_test
