// Writes a small HLP result file for corpus/result_file/: what ResultReader and hlp-analyze
// read (root attributes, /steps/step and two metrics, /trace/rank<N>, /model, /pipeline,
// /summary) with the writer's own types, but compact datasets and few metrics, so the file is
// a few KiB instead of the ~110 KiB of ResultWriter's chunked layout (a fuzzer mutates every
// byte). Not built by default: cmake --build build --target fuzz_make_result_seed
//   fuzz_make_result_seed OUT.h5 RANKS     (RANKS 1: strategy single, 2: a gpipe pipeline)
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "metrics/h5_util.h"
#include "metrics/schema.h"
#include "metrics/trace_row.h"

namespace h5 = hlp::metrics::h5;
namespace schema = hlp::metrics::schema;

namespace {

// A 1-D or 2-D dataset of `type`, stored compactly in its object header.
void write_dataset(hid_t parent, const char* name, hid_t file_type, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* data) {
  h5::Handle sp = h5::space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), name);
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), name);
  h5::check_status(H5Pset_layout(dcpl, H5D_COMPACT), name);
  h5::Handle ds = h5::dataset(
      H5Dcreate2(parent, name, file_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), name);
  h5::check_status(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
}

h5::Handle new_group(hid_t parent, const char* name) {
  return h5::group(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name);
}

void write_seed(const std::string& path, int ranks) {
  const bool pipeline = ranks > 1;
  const hsize_t steps = 3;
  h5::Handle file = h5::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                             "create " + path);
  h5::write_attr(file, schema::kAttrSchemaVersion, schema::kSchemaVersion);
  h5::write_attr(file, schema::kAttrComplete, int64_t(1));
  h5::write_attr(file, schema::kAttrWorldSize, int64_t(ranks));
  h5::write_attr(file, schema::kAttrMesh, std::vector<int64_t>{1, ranks, 1});
  h5::write_attr(file, schema::kAttrStrategy, std::string(pipeline ? "pp" : "single"));
  h5::write_attr(file, schema::kAttrBackend, std::string("mpi"));
  h5::write_attr(file, schema::kAttrDevice, std::string("cpu"));
  h5::write_attr(file, schema::kAttrConfig,
                 std::string("strategy = pp\nseq-len = 32\nmicro-batch = 2\nglobal-batch = 4\n"
                             "micro-batches = 0\nprecision = fp32\n"));
  h5::write_attr(file, schema::kAttrHosts, std::string(pipeline ? "a,b" : "a"));
  h5::write_attr(file, schema::kAttrTorchVersion, std::string("none"));
  h5::write_attr(file, schema::kAttrThreadsPerRank, int64_t(1));
  h5::write_attr(file, schema::kAttrPeakFlopsPerDevice, 1e9);
  h5::write_attr(file, schema::kAttrPeakFlopsSource, std::string("test"));
  h5::write_attr(file, schema::kAttrStartUnixS, 1.7e9);
  h5::write_attr(file, schema::kAttrClockOffsetS, std::vector<double>(size_t(ranks), 0.0));
  h5::write_attr(file, schema::kAttrClockRttS, std::vector<double>(size_t(ranks), 1e-5));

  h5::Handle steps_group = new_group(file, schema::kStepsGroup);
  const std::vector<int64_t> step_numbers = {0, 1, 2};
  write_dataset(steps_group, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, {steps}, step_numbers.data());
  const std::vector<double> values(size_t(ranks) * steps, 0.5);
  for (const char* metric : {schema::kLoss, schema::kStepTime})
    write_dataset(steps_group, metric, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {hsize_t(ranks), steps},
                  values.data());

  h5::Handle trace = new_group(file, schema::kTraceGroup);
  h5::Handle row_type = hlp::metrics::make_trace_row_type();
  for (int r = 0; r < ranks; ++r) {
    std::vector<hlp::metrics::TraceEvent> events(2);
    events[0].name = "forward";
    events[0].category = "compute";
    events[0].step = 1;
    events[0].micro_batch = 0;
    events[0].start_s = 1.0 + r;
    events[0].end_s = 2.0 + r;
    events[1] = events[0];
    events[1].name = "backward";
    events[1].start_s = 3.0 + r;
    events[1].end_s = 4.0 + r;
    const auto rows = hlp::metrics::to_trace_rows(events);
    write_dataset(trace, ("rank" + std::to_string(r)).c_str(), row_type, row_type,
                  {rows.size()}, rows.data());
  }

  h5::Handle model = new_group(file, schema::kModelGroup);
  h5::write_attr(model, schema::kModelName, std::string("tiny"));
  h5::write_attr(model, schema::kPattern, std::string("GA"));
  h5::write_attr(model, schema::kParamsTotal, int64_t(1000));
  h5::write_attr(model, schema::kParamsTrainable, int64_t(10));
  h5::write_attr(model, schema::kFlopsPerToken, 6000.0);
  h5::write_attr(model, schema::kFlopsPerTokenExecuted, 4000.0);
  h5::write_attr(model, schema::kFlopsConvention, std::string("model"));
  h5::write_attr(model, schema::kParamsPerRank, std::vector<int64_t>(size_t(ranks), 1000 / ranks));

  if (pipeline) {
    h5::Handle p = new_group(file, schema::kPipelineGroup);
    h5::write_attr(p, schema::kStageFirstLayer, std::vector<int64_t>{0, 1});
    h5::write_attr(p, schema::kStageCost, std::vector<double>{1.0, 1.0});
    h5::write_attr(p, schema::kStageCostMeasured, std::vector<double>{0.5, 0.5});
    h5::write_attr(p, schema::kBubbleFraction, 0.25);
    h5::write_attr(p, schema::kBubbleFractionTheory, 1.0 / 3.0);
    h5::write_attr(p, schema::kSchedule, std::string("gpipe"));
    h5::write_attr(p, schema::kSplit, std::string("uniform"));
    h5::write_attr(p, schema::kMicroBatches, int64_t(2));
  }

  h5::Handle summary = new_group(file, schema::kSummaryGroup);
  h5::write_attr(summary, schema::kSummarySkipSteps, int64_t(1));
  h5::write_attr(summary, schema::kSummaryStepsUsed, int64_t(2));
  h5::write_attr(summary, std::string(schema::kLoss) + schema::kMedianPerRankSuffix,
                 std::vector<double>(size_t(ranks), 0.5));
  h5::write_attr(summary, std::string(schema::kLoss) + schema::kMedianMaxSuffix, 0.5);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[2]) != "1" && std::string(argv[2]) != "2")) {
    std::fprintf(stderr, "usage: fuzz_make_result_seed OUT.h5 RANKS(1|2)\n");
    return 2;
  }
  try {
    h5::silence_hdf5_errors();
    write_seed(argv[1], std::stoi(argv[2]));
  } catch (const hlp::UserError& e) {
    std::fprintf(stderr, "fuzz_make_result_seed: %s\n", e.what());
    return 1;
  }
  return 0;
}
