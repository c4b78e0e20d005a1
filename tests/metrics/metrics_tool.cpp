// Test driver for the result file (own main; MPI_Init only in the writing modes). Modes:
//   write FILE --steps N --flush-every K [--ready-file F] [--export JSON]   (under mpiexec)
//       Writes N steps of known values + trace events through Recorder and ResultWriter.
//       Without --ready-file: finish(), then rank 0 checks the file (and the export).
//       With --ready-file: after the loop (no finish), rank 0 writes every rank's pid to F and
//       all ranks sleep until killed (the SIGKILL test).
//   check FILE --world W --steps S --complete 0|1     (no MPI) every contracted path and value
//   export FILE JSON --world W --steps S               (no MPI) Perfetto export + its checks
//   reject FILE DIR                                    (no MPI) foreign/truncated files -> UserError
//   errors DIR                                         (under mpiexec) writer misuse -> UserError
//                                                      on every rank, no hang
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "metrics/result_writer.h"
#include "metrics/schema.h"
#include "tool_common.h"

namespace m = hlp::metrics;
namespace schema = hlp::metrics::schema;
using namespace metrics_test;

namespace {

std::string arg_value(int argc, char** argv, const std::string& flag, const std::string& dflt) {
  for (int i = 0; i + 1 < argc; ++i)
    if (flag == argv[i]) return argv[i + 1];
  return dflt;
}

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
  pipe.stage_cpu_measured_s = {0.009, 0.015};
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
  // Only the writing modes are MPI programs: check/export/reject read like the analysis tool
  // does, without MPI_Init (the parallel HDF5 library with its default file access).
  const bool uses_mpi = mode == "write" || mode == "errors";
  if (uses_mpi) MPI_Init(&argc, &argv);
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
  if (uses_mpi) MPI_Finalize();
  return rc;
}
