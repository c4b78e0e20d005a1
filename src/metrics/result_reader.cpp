#include "metrics/result_reader.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "metrics/h5_global_heap.h"
#include "metrics/h5_util.h"
#include "metrics/schema.h"
#include "metrics/trace_row.h"

namespace hlp::metrics {

struct ResultReader::State {
  std::string path;
  uint64_t file_bytes = 0;
  h5::Handle file;
  int world = 0;

  // The extent of dataset `ds`, which must have `rank` dimensions. A corrupt dataspace may claim
  // any size; HLP's writer allocates every chunk it extends (no compression), so data that would
  // not fit in the file is refused before anything is allocated for it.
  std::vector<hsize_t> extent(hid_t ds, int rank, uint64_t element_bytes) const {
    h5::Handle sp = h5::space(H5Dget_space(ds), "space");
    if (H5Sget_simple_extent_ndims(sp) != rank)
      throw user_error("not a ", rank, "-D dataset");
    std::vector<hsize_t> dims(size_t(rank), 0);
    H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    uint64_t bytes = element_bytes;
    for (hsize_t d : dims)
      if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes) || bytes > file_bytes)
        throw user_error("its extent claims more data than the whole file (", file_bytes, " bytes)");
    // A compact dataset keeps its bytes in its header; libhdf5 1.10.8 copies the whole extent
    // from there without comparing the two (an out-of-bounds read; tests/fuzz/regressions/).
    h5::Handle dcpl = h5::plist(H5Dget_create_plist(ds), "creation list");
    if (H5Pget_layout(dcpl) == H5D_COMPACT) {
      h5::Handle stored = h5::type(H5Dget_type(ds), "type");
      uint64_t stored_bytes = H5Tget_size(stored);
      bool overflow = false;
      for (hsize_t d : dims) overflow |= __builtin_mul_overflow(stored_bytes, uint64_t(d), &stored_bytes);
      if (overflow || H5Dget_storage_size(ds) < stored_bytes)
        throw user_error("a compact dataset of ", stored_bytes, " bytes stores only ",
                         H5Dget_storage_size(ds));
    }
    return dims;
  }

  // Wraps any HDF5-level failure with the file's name.
  template <typename F>
  auto guarded(const std::string& what, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const UserError& e) {
      throw user_error(path, ": ", what, ": ", e.what(),
                       " (the file may be truncated or corrupt)");
    }
  }
};

ResultReader::ResultReader(const std::string& path) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = path;
  h5::silence_hdf5_errors();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw user_error("result file '", path, "' does not exist or is not a file");
  s.file_bytes = std::filesystem::file_size(path, ec);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw user_error("'", path, "' is not an HDF5 file (or it is truncated/corrupt)");
  h5::check_global_heaps(path);  // before libhdf5 reads a string from them
  // No file locking for a read-only open: Lustre mounts without flock (common on clusters)
  // otherwise fail every open with "unable to lock file".
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), "file access list");
  H5Pset_file_locking(fapl, false, true);
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (fid < 0)
    throw user_error("cannot open '", path,
                     "' as HDF5: the file is truncated or corrupt (a job killed while writing?)");
  s.file = h5::Handle(fid, H5Fclose);
  if (!h5::has_attr(s.file, schema::kAttrSchemaVersion))
    throw user_error("'", path, "' is not an HLP result file (no ", schema::kAttrSchemaVersion,
                     " attribute)");
  const int64_t version = s.guarded("schema version", [&] {
    return h5::read_attr_int(s.file, schema::kAttrSchemaVersion);
  });
  if (version < 1 || version > schema::kSchemaVersion)
    throw user_error("'", path, "' has HLP schema version ", version, "; this build reads 1..",
                     schema::kSchemaVersion, " (update HLP)");
  const int64_t world =
      s.guarded("world size", [&] { return h5::read_attr_int(s.file, schema::kAttrWorldSize); });
  // The datasets every file has from creation on: a file missing them is damaged.
  for (const char* p : {schema::kStepsGroup, schema::kStepIndex, schema::kTraceGroup}) {
    if (!h5::link_exists(s.file, p))
      throw user_error("'", path, "' has no ", p, ": damaged or not written by HLP");
  }
  // /trace/rank<N> of every rank is created with the file: a larger world_size is corrupt (and
  // would size per-rank tables, as hlp-analyze's).
  const hsize_t trace_links = s.guarded(schema::kTraceGroup, [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kTraceGroup, H5P_DEFAULT), "open");
    H5G_info_t info;
    h5::check_status(H5Gget_info(g, &info), "list");
    return info.nlinks;
  });
  if (world < 1 || uint64_t(world) > trace_links)
    throw user_error("'", path, "' has world_size ", world, " but ", trace_links, " datasets in ",
                     schema::kTraceGroup, " (corrupt file)");
  s.world = static_cast<int>(world);
}

ResultReader::~ResultReader() = default;

const std::string& ResultReader::path() const { return state_->path; }
int64_t ResultReader::schema_version() const { return attr_int(schema::kAttrSchemaVersion); }
bool ResultReader::complete() const { return attr_int(schema::kAttrComplete) == 1; }
int ResultReader::world_size() const { return state_->world; }

bool ResultReader::has_attr(const std::string& name) const {
  return h5::has_attr(state_->file, name);
}
std::string ResultReader::attr_string(const std::string& name) const {
  return state_->guarded(name, [&] { return h5::read_attr_string(state_->file, name); });
}
int64_t ResultReader::attr_int(const std::string& name) const {
  return state_->guarded(name, [&] { return h5::read_attr_int(state_->file, name); });
}
double ResultReader::attr_double(const std::string& name) const {
  return state_->guarded(name, [&] { return h5::read_attr_double(state_->file, name); });
}
std::vector<int64_t> ResultReader::attr_ints(const std::string& name) const {
  return state_->guarded(name, [&] { return h5::read_attr_ints(state_->file, name); });
}
std::vector<double> ResultReader::attr_doubles(const std::string& name) const {
  return state_->guarded(name, [&] { return h5::read_attr_doubles(state_->file, name); });
}

RunInfo ResultReader::run_info() const {
  RunInfo info;
  info.strategy = attr_string(schema::kAttrStrategy);
  info.backend = attr_string(schema::kAttrBackend);
  info.device = attr_string(schema::kAttrDevice);
  const auto mesh = attr_ints(schema::kAttrMesh);
  if (mesh.size() == 3) info.mesh = {mesh[0], mesh[1], mesh[2]};
  info.config_ini = attr_string(schema::kAttrConfig);
  info.libtorch_version = attr_string(schema::kAttrTorchVersion);
  info.threads_per_rank = attr_int(schema::kAttrThreadsPerRank);
  info.peak_flops_per_device = attr_double(schema::kAttrPeakFlopsPerDevice);
  info.peak_flops_source = attr_string(schema::kAttrPeakFlopsSource);
  const auto offsets = attr_doubles(schema::kAttrClockOffsetS);
  const auto rtts = attr_doubles(schema::kAttrClockRttS);
  if (!offsets.empty()) info.clock.offset_s = offsets[0];
  if (!rtts.empty()) info.clock.rtt_s = rtts[0];
  return info;
}

std::vector<double> ResultReader::clock_offsets_s() const {
  return attr_doubles(schema::kAttrClockOffsetS);
}

std::vector<std::string> ResultReader::hosts() const {
  const std::string all = attr_string(schema::kAttrHosts);
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t comma = all.find(',', pos);
    out.push_back(all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<std::string> ResultReader::step_metrics() const {
  const State& s = *state_;
  return s.guarded("list /steps", [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kStepsGroup, H5P_DEFAULT), "open /steps");
    H5G_info_t info;
    h5::check_status(H5Gget_info(g, &info), "list /steps");
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0,
                                           H5P_DEFAULT);
      if (n < 0) throw user_error("list /steps");
      std::string name(static_cast<size_t>(n), '\0');
      H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                         H5P_DEFAULT);
      if (name != "step") names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  });
}

bool ResultReader::has_step_metric(const std::string& metric) const {
  return h5::link_exists(state_->file, std::string(schema::kStepsGroup) + "/" + metric);
}

int64_t ResultReader::num_steps() const {
  const State& s = *state_;
  return s.guarded("/steps/step", [&] {
    h5::Handle ds = h5::dataset(H5Dopen2(s.file, schema::kStepIndex, H5P_DEFAULT), "open");
    return static_cast<int64_t>(s.extent(ds, 1, sizeof(int64_t))[0]);
  });
}

std::vector<int64_t> ResultReader::step_numbers() const {
  const State& s = *state_;
  const int64_t n = num_steps();
  return s.guarded("/steps/step", [&] {
    std::vector<int64_t> v(static_cast<size_t>(n));
    h5::Handle ds = h5::dataset(H5Dopen2(s.file, schema::kStepIndex, H5P_DEFAULT), "open");
    if (n > 0)
      h5::check_status(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                       "read");
    return v;
  });
}

StepMatrix ResultReader::steps(const std::string& metric) const {
  const State& s = *state_;
  if (!has_step_metric(metric))
    throw user_error("'", s.path, "' has no step metric '", metric, "'");
  const std::string p = std::string(schema::kStepsGroup) + "/" + metric;
  return s.guarded(p, [&] {
    h5::Handle ds = h5::dataset(H5Dopen2(s.file, p.c_str(), H5P_DEFAULT), "open");
    const std::vector<hsize_t> dims = s.extent(ds, 2, sizeof(double));
    StepMatrix m;
    m.ranks = static_cast<int64_t>(dims[0]);
    m.steps = static_cast<int64_t>(dims[1]);
    m.values.resize(static_cast<size_t>(m.ranks * m.steps));
    if (!m.values.empty())
      h5::check_status(
          H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.values.data()), "read");
    return m;
  });
}

std::vector<TraceEvent> ResultReader::trace(int rank) const {
  const State& s = *state_;
  if (rank < 0 || rank >= s.world)
    throw user_error("rank ", rank, " out of range: '", s.path, "' has ranks 0..", s.world - 1);
  const std::string p = std::string(schema::kTraceGroup) + "/rank" + std::to_string(rank);
  return s.guarded(p, [&] {
    if (!h5::link_exists(s.file, p)) throw user_error("missing");
    h5::Handle ds = h5::dataset(H5Dopen2(s.file, p.c_str(), H5P_DEFAULT), "open");
    const h5::Handle stored = h5::type(H5Dget_type(ds), "type");
    if (!is_trace_row_type(stored)) throw user_error("not a table of trace rows");
    std::vector<TraceRow> rows(static_cast<size_t>(s.extent(ds, 1, sizeof(TraceRow))[0]));
    h5::Handle t = make_trace_row_type();
    if (!rows.empty())
      h5::check_status(H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), "read");
    return from_trace_rows(rows);
  });
}

std::optional<ModelInfo> ResultReader::model() const {
  const State& s = *state_;
  if (!h5::link_exists(s.file, schema::kModelGroup)) return std::nullopt;
  return s.guarded(schema::kModelGroup, [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kModelGroup, H5P_DEFAULT), "open");
    ModelInfo m;
    m.name = h5::read_attr_string(g, schema::kModelName);
    m.pattern = h5::read_attr_string(g, schema::kPattern);
    if (h5::has_attr(g, schema::kAttnImpl)) m.attn_impl = h5::read_attr_string(g, schema::kAttnImpl);
    m.params_total = h5::read_attr_int(g, schema::kParamsTotal);
    m.params_trainable = h5::read_attr_int(g, schema::kParamsTrainable);
    m.flops_per_token = h5::read_attr_double(g, schema::kFlopsPerToken);
    m.flops_per_token_executed = h5::read_attr_double(g, schema::kFlopsPerTokenExecuted);
    m.flops_convention = h5::read_attr_string(g, schema::kFlopsConvention);
    m.params_per_rank = h5::read_attr_ints(g, schema::kParamsPerRank);
    if (h5::has_attr(g, schema::kPlanStepS)) {  // files before 2026-11-26 lack the plan
      m.plan_device = h5::read_attr_string(g, schema::kPlanDevice);
      m.plan_step_s = h5::read_attr_double(g, schema::kPlanStepS);
      m.plan_tokens_per_s = h5::read_attr_double(g, schema::kPlanTokensPerS);
    }
    return std::optional<ModelInfo>(std::move(m));
  });
}

std::optional<PipelineInfo> ResultReader::pipeline() const {
  const State& s = *state_;
  if (!h5::link_exists(s.file, schema::kPipelineGroup)) return std::nullopt;
  return s.guarded(schema::kPipelineGroup, [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kPipelineGroup, H5P_DEFAULT), "open");
    PipelineInfo p;
    p.stage_first_layer = h5::read_attr_ints(g, schema::kStageFirstLayer);
    p.stage_cost = h5::read_attr_doubles(g, schema::kStageCost);
    p.stage_cost_measured_s = h5::read_attr_doubles(g, schema::kStageCostMeasured);
    if (h5::has_attr(g, schema::kStageCpuMeasured))  // files before 2026-11-22 lack it
      p.stage_cpu_measured_s = h5::read_attr_doubles(g, schema::kStageCpuMeasured);
    p.bubble_fraction = h5::read_attr_double(g, schema::kBubbleFraction);
    p.bubble_fraction_theory = h5::read_attr_double(g, schema::kBubbleFractionTheory);
    p.schedule = h5::read_attr_string(g, schema::kSchedule);
    p.split = h5::read_attr_string(g, schema::kSplit);
    p.micro_batches = h5::read_attr_int(g, schema::kMicroBatches);
    if (h5::has_attr(g, schema::kVirtualChunks))  // files before 2026-11-25 lack it (V = 1)
      p.virtual_chunks = h5::read_attr_int(g, schema::kVirtualChunks);
    if (h5::has_attr(g, schema::kBubbleFractionSimulated))
      p.bubble_fraction_simulated = h5::read_attr_double(g, schema::kBubbleFractionSimulated);
    return std::optional<PipelineInfo>(std::move(p));
  });
}

std::optional<ExpertsInfo> ResultReader::experts() const {
  const State& s = *state_;
  if (!h5::link_exists(s.file, schema::kExpertsGroup)) return std::nullopt;
  return s.guarded(schema::kExpertsGroup, [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kExpertsGroup, H5P_DEFAULT), "open");
    ExpertsInfo e;
    e.experts = h5::read_attr_int(g, schema::kExpertsCount);
    e.top_k = h5::read_attr_int(g, schema::kExpertsTopK);
    e.ep = h5::read_attr_int(g, schema::kEpSize);
    e.layers = h5::read_attr_ints(g, schema::kExpertsLayers);
    e.first_step = h5::read_attr_int(g, schema::kExpertsFirstStep);
    e.all_to_all_bytes = h5::read_attr_ints(g, schema::kExpertsAllToAllBytes);
    auto table = [&](const char* name) {
      h5::Handle ds = h5::dataset(H5Dopen2(g, name, H5P_DEFAULT), name);
      // [rows, layers, experts]; an extent larger than the file is refused before allocating
      const std::vector<hsize_t> dims = s.extent(ds, 3, sizeof(int64_t));
      std::vector<int64_t> v(size_t(dims[0] * dims[1] * dims[2]));
      if (!v.empty())
        h5::check_status(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                         "read");
      return v;
    };
    e.tokens = table(schema::kExpertsTokens);
    e.rank_tokens = table(schema::kExpertsRankTokens);
    return std::optional<ExpertsInfo>(std::move(e));
  });
}

std::optional<ContextParallelInfo> ResultReader::context_parallel() const {
  const State& s = *state_;
  if (!h5::link_exists(s.file, schema::kContextParallelGroup)) return std::nullopt;
  return s.guarded(schema::kContextParallelGroup, [&] {
    h5::Handle g =
        h5::group(H5Gopen2(s.file, schema::kContextParallelGroup, H5P_DEFAULT), "open");
    ContextParallelInfo c;
    c.cp = h5::read_attr_int(g, schema::kCpSize);
    c.layout = h5::read_attr_string(g, schema::kCpLayout);
    if (h5::has_attr(g, schema::kCpScheme))  // files before 2026-11-27: the chain
      c.scheme = h5::read_attr_string(g, schema::kCpScheme);
    if (h5::has_attr(g, schema::kCpAttentionScheme))  // files before --cp-attention: ring
      c.attention_scheme = h5::read_attr_string(g, schema::kCpAttentionScheme);
    std::string kinds = h5::read_attr_string(g, schema::kCpExchangeKinds);
    for (size_t start = 0; start <= kinds.size();) {
      const size_t comma = std::min(kinds.find(',', start), kinds.size());
      if (comma > start) c.exchange_kinds.push_back(kinds.substr(start, comma - start));
      start = comma + 1;
    }
    c.bytes_sent = h5::read_attr_ints(g, schema::kCpBytesSent);
    c.attention_score_entries = h5::read_attr_ints(g, schema::kCpAttentionEntries);
    c.attention_s = h5::read_attr_doubles(g, schema::kCpAttentionSeconds);
    c.state_chain_s = h5::read_attr_doubles(g, schema::kCpStateChainSeconds);
    c.steps = h5::read_attr_int(g, schema::kCpSteps);
    return std::optional<ContextParallelInfo>(std::move(c));
  });
}

std::optional<Summary> ResultReader::summary() const {
  const State& s = *state_;
  if (!h5::link_exists(s.file, schema::kSummaryGroup)) return std::nullopt;
  const std::vector<std::string> metrics = step_metrics();
  return s.guarded(schema::kSummaryGroup, [&] {
    h5::Handle g = h5::group(H5Gopen2(s.file, schema::kSummaryGroup, H5P_DEFAULT), "open");
    Summary sum;
    sum.skip_steps = h5::read_attr_int(g, schema::kSummarySkipSteps);
    sum.steps_used = h5::read_attr_int(g, schema::kSummaryStepsUsed);
    for (const auto& m : metrics) {
      const std::string per_rank = m + schema::kMedianPerRankSuffix;
      if (!h5::has_attr(g, per_rank)) continue;
      sum.median_per_rank[m] = h5::read_attr_doubles(g, per_rank);
      sum.median_max_over_ranks[m] = h5::read_attr_double(g, m + schema::kMedianMaxSuffix);
    }
    return std::optional<Summary>(std::move(sum));
  });
}

}  // namespace hlp::metrics
