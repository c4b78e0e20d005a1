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
//   append DIR                                         (under mpiexec) a requeued run's file:
//       launch 1 writes steps 0..9 (flush every 3) and stops without finish() (steps 0..8 on
//       disk), launch 2 resumes at step 6 (its checkpoint) and writes 6..11: the file holds
//       steps 0..11 once (check), its trace each step's events once, two /segments; a launch of
//       another run is refused on every rank and the file is unchanged; a resume without a file
//       creates one.
#include <hdf5.h>
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
#include "metrics/result_reader.h"
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

m::RunInfo test_run_info(int world, const m::Recorder& rec) {
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
  return info;
}

// One launch: the model and pipeline attributes, then steps [first, last) of known values and
// events through the recorder (the writer's own flushes every K steps; no finish()).
void write_launch(m::ResultWriter& writer, m::Recorder& rec, int rank, int world, int64_t first,
                  int64_t last) {
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

  for (int64_t step = first; step < last; ++step) {
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
  m::WriterOptions opt;
  opt.flush_every_steps = flush_every;
  opt.extra_metrics = {kExtraMetric};
  m::ResultWriter writer(MPI_COMM_WORLD, path, test_run_info(world, rec), opt);
  write_launch(writer, rec, rank, world, 0, steps);

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

// A requeue: see the header. Launches are separate writers on the same path, as separate
// processes would be (each its own recorder, clock and writer lock).
int run_append(const std::string& dir) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string path = dir + "/requeued.h5";
  if (rank == 0) std::filesystem::remove(path);
  MPI_Barrier(MPI_COMM_WORLD);
  m::WriterOptions opt;
  opt.flush_every_steps = 3;
  opt.extra_metrics = {kExtraMetric};
  {  // launch 1: killed after step 9 (its last flush wrote steps 0..8)
    m::Recorder rec(rank);
    rec.align_clocks(MPI_COMM_WORLD);
    m::WriterOptions first = opt;
    first.append_from_step = 0;  // --resume without a checkpoint yet: creates the file
    m::ResultWriter writer(MPI_COMM_WORLD, path, test_run_info(world, rec), first);
    write_launch(writer, rec, rank, world, 0, 10);
    EXPECT(writer.steps_written() == 9 && writer.buffered_steps() == 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    m::ResultReader r(path);
    EXPECT(r.num_steps() == 9 && !r.complete());
  }
  {  // launch 2: resumes from the checkpoint at step 6 and finishes
    m::Recorder rec(rank);
    rec.align_clocks(MPI_COMM_WORLD);
    m::WriterOptions second = opt;
    second.append_from_step = 6;
    m::ResultWriter writer(MPI_COMM_WORLD, path, test_run_info(world, rec), second);
    EXPECT(writer.steps_written() == 6);
    write_launch(writer, rec, rank, world, 6, 12);
    writer.finish();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int failures = 0;
  if (rank == 0) {
    failures += check_file(path, world, 12, 1);  // steps 0..11 once, values, trace, /summary
    failures += check_export(path, dir + "/requeued.trace.json", world, 12);
    m::ResultReader r(path);
    EXPECT(r.attr_string(schema::kAttrConfigFingerprint).size() == 16);
    EXPECT(r.has_attr(schema::kAttrTraceEpochUnixS));
    std::cout << "append: steps 0..11 once after a resume at step 6\n";
  }
  // Segments: read with the HDF5 C API, as any reader would.
  if (rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, schema::kSegmentsGroup, H5P_DEFAULT);
    EXPECT(g >= 0);
    const hid_t a = H5Aopen(g, schema::kSegFirstStep, H5P_DEFAULT);
    int64_t first[4] = {-1, -1, -1, -1};
    const hid_t sp = H5Aget_space(a);
    EXPECT(H5Sget_simple_extent_npoints(sp) == 2);
    H5Aread(a, H5T_NATIVE_INT64, first);
    EXPECT(first[0] == 0 && first[1] == 6);
    const hid_t b = H5Aopen(g, schema::kSegTraceShiftS, H5P_DEFAULT);
    double shift[2] = {-1, -1};
    H5Aread(b, H5T_NATIVE_DOUBLE, shift);
    EXPECT(shift[0] == 0.0 && shift[1] > 0.0);  // the second launch started later
    H5Aclose(b);
    H5Sclose(sp);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
    std::cout << "append: /segments first_step [" << first[0] << ", " << first[1]
              << "], trace shift of launch 2 " << shift[1] << " s\n";
  }
  // Another run (another configuration) resuming on this file: refused on every rank, with
  // what differs; the file stays as it was.
  const auto size_before = rank == 0 ? std::filesystem::file_size(path) : 0;
  expect_user_error([&] {
    m::Recorder rec(rank);
    m::RunInfo info = test_run_info(world, rec);
    info.config_ini = info.config_identity = "[run]\nstrategy = fsdp2\n";
    m::WriterOptions other = opt;
    other.append_from_step = 3;
    m::ResultWriter writer(MPI_COMM_WORLD, path, info, other);
  }, "belongs to another run (strategy 'ddp' there, 'fsdp2' here");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT(std::filesystem::file_size(path) == size_before);
    failures += check_file(path, world, 12, 1);
    std::cout << "append: another run's resume refused, the file unchanged\n";
  }
  // A resume whose file is gone: created, starting at the checkpoint's step.
  {
    const std::string fresh = dir + "/fresh.h5";
    if (rank == 0) std::filesystem::remove(fresh);
    MPI_Barrier(MPI_COMM_WORLD);
    m::Recorder rec(rank);
    m::WriterOptions o = opt;
    o.append_from_step = 4;
    m::ResultWriter writer(MPI_COMM_WORLD, fresh, test_run_info(world, rec), o);
    EXPECT(writer.steps_written() == 0);
    writer.finish();
  }
  failures += g_failures;
  int total = 0;
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
  const bool uses_mpi = mode == "write" || mode == "errors" || mode == "append";
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
    } else if (mode == "append") {
      std::filesystem::create_directories(argv[2]);
      rc = run_append(argv[2]) ? 1 : 0;
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
