#include "analysis/run_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

#include "common/error.h"
#include "metrics/result_reader.h"
#include "metrics/schema.h"

namespace hlp::analysis {
namespace fs = std::filesystem;
namespace schema = metrics::schema;

std::string RunData::key() const {
  std::string k;
  for (const auto& c : config_columns()) {
    auto it = config.find(c);
    k += (it == config.end() ? "?" : it->second);
    k += '\x1f';
  }
  return k;
}

double ExpertLoad::imbalance(size_t l) const {
  int64_t busiest = 0, total = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t v = tokens[l * size_t(experts) + size_t(e)];
    busiest = std::max(busiest, v);
    total += v;
  }
  return total > 0 ? double(busiest) / (double(total) / double(experts))
                   : std::numeric_limits<double>::quiet_NaN();
}

int64_t RunData::config_int(const std::string& column) const {
  auto it = config.find(column);
  if (it == config.end()) return -1;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    return used == it->second.size() ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<std::string> find_result_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(
               in, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec) && it->path().extension() == ".h5")
          found.push_back(it->path().string());
      }
      if (ec) throw user_error("cannot list directory '", in, "': ", ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      throw user_error("input '", in, "' does not exist (give result directories or .h5 files)");
    }
  }
  return files;
}

std::map<std::string, std::string> parse_ini(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

const std::vector<std::string>& analysed_metrics() {
  static const std::vector<std::string> m = {
      schema::kLoss,         schema::kStepTime,      schema::kTokensPerS,
      schema::kDataWait,     schema::kForward,       schema::kBackward,
      schema::kOptimizer,    schema::kCommExposed,   schema::kCommBytes,
      schema::kPeakBytes,    schema::kParamBytes,    schema::kGradBytes,
      schema::kOptimizerBytes, schema::kActivationBytes, schema::kMfuModel,
      schema::kMfuExecuted,  schema::kPipelineWait,  schema::kOther,
      schema::kCpuUtil,      schema::kActivationPredicted,
      schema::kStepSkipped,  schema::kLossScale,  // fp16 loss scaling (absent in older files)
      schema::kExpertImbalance, schema::kAllToAllBytes};  // sparse MoE models only
  return m;
}

RankReduction reduction_for(const std::string& metric) {
  if (metric == schema::kTokensPerS || metric == schema::kTokensPerSPerDevice ||
      metric == schema::kMfu || metric == schema::kMfuModel || metric == schema::kMfuExecuted)
    return RankReduction::Min;
  if (metric == schema::kLoss || metric == schema::kLr || metric == schema::kGradNorm)
    return RankReduction::Mean;
  return RankReduction::Max;  // *_s, *_bytes
}

namespace {

// StepMatrix [ranks, steps] -> [steps], NaN-aware.
std::vector<double> reduce_over_ranks(const metrics::StepMatrix& m, RankReduction how) {
  std::vector<double> out(static_cast<size_t>(m.steps), std::numeric_limits<double>::quiet_NaN());
  for (int64_t s = 0; s < m.steps; ++s) {
    double acc = 0.0;
    int64_t n = 0;
    for (int64_t r = 0; r < m.ranks; ++r) {
      const double v = m.at(r, s);
      if (std::isnan(v)) continue;
      if (n == 0) acc = v;
      else if (how == RankReduction::Max) acc = std::max(acc, v);
      else if (how == RankReduction::Min) acc = std::min(acc, v);
      else acc += v;
      ++n;
    }
    if (n > 0) out[static_cast<size_t>(s)] = how == RankReduction::Mean ? acc / double(n) : acc;
  }
  return out;
}

std::string ini_value(const std::map<std::string, std::string>& ini, const std::string& key) {
  auto it = ini.find(key);
  return it == ini.end() || it->second.empty() ? "?" : it->second;
}

// "2026-11-22T00:30:00Z" (the writer's ISO-8601 UTC) -> seconds since the epoch; NaN otherwise.
double iso_utc_seconds(const std::string& iso) {
  std::tm tm{};
  char z = 0;
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z) != 7 || z != 'Z')
    return std::numeric_limits<double>::quiet_NaN();
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return double(timegm(&tm));
}

// The job's wall time from its start and end attributes (second resolution); NaN when unfinished.
double wall_seconds(const metrics::ResultReader& reader) {
  if (!reader.has_attr(schema::kAttrStartTime) || !reader.has_attr(schema::kAttrEndTime))
    return std::numeric_limits<double>::quiet_NaN();
  const double start = iso_utc_seconds(reader.attr_string(schema::kAttrStartTime));
  const double end = iso_utc_seconds(reader.attr_string(schema::kAttrEndTime));
  return end >= start ? end - start : std::numeric_limits<double>::quiet_NaN();
}

RunData load_one(const std::string& path) {
  metrics::ResultReader reader(path);
  RunData run;
  run.path = path;
  run.complete = reader.complete();
  run.wall_s = wall_seconds(reader);
  run.oversubscribed = reader.has_attr(schema::kAttrOversubscribed) &&
                       reader.attr_int(schema::kAttrOversubscribed) != 0;
  const auto ini = parse_ini(reader.has_attr(schema::kAttrConfig)
                                 ? reader.attr_string(schema::kAttrConfig)
                                 : std::string());
  auto& c = run.config;
  c["strategy"] = reader.attr_string(schema::kAttrStrategy);
  std::vector<int64_t> mesh = {reader.world_size(), 1, 1};
  if (reader.has_attr(schema::kAttrMesh)) mesh = reader.attr_ints(schema::kAttrMesh);
  if (mesh.size() != 3) throw user_error("'", path, "': mesh attribute has ", mesh.size(),
                                         " entries, expected 3 (dp, pp, tp)");
  if (mesh[0] < 1 || mesh[1] < 1 || mesh[2] < 1)  // dp divides below
    throw user_error("'", path, "': mesh attribute (", mesh[0], ", ", mesh[1], ", ", mesh[2],
                     ") holds a size below 1 (corrupt file)");
  c["dp"] = std::to_string(mesh[0]);
  c["pp"] = std::to_string(mesh[1]);
  c["tp"] = std::to_string(mesh[2]);
  // context parallelism (issue 25): from the config (files from before it have none: cp 1)
  c["cp"] = ini_value(ini, "cp") == "?" ? "1" : ini_value(ini, "cp");
  // expert parallelism: carved out of dp x cp, so not in `mesh`; its size is mesh_sizes' entry
  // for the axis mesh_axes names "ep" (files before it have none: ep 1)
  c["ep"] = "1";
  if (reader.has_attr(schema::kAttrMeshAxes) && reader.has_attr(schema::kAttrMeshSizes)) {
    std::istringstream axes(reader.attr_string(schema::kAttrMeshAxes));
    const auto sizes = reader.attr_ints(schema::kAttrMeshSizes);
    std::string axis;
    for (size_t i = 0; std::getline(axes, axis, ',') && i < sizes.size(); ++i)
      if (axis == "ep") c["ep"] = std::to_string(sizes[i]);
  }
  c["world_size"] = std::to_string(reader.world_size());
  c["device"] = reader.has_attr(schema::kAttrDevice) ? reader.attr_string(schema::kAttrDevice) : "?";
  const auto model = reader.model();
  c["model"] = model && !model->name.empty() ? model->name : ini_value(ini, "model");
  if (c["model"] == "?") c["model"] = ini_value(ini, "preset");
  c["pattern"] = model && !model->pattern.empty() ? model->pattern : ini_value(ini, "pattern");
  c["lora_rank"] = ini_value(ini, "lora-rank");
  c["seq_len"] = ini_value(ini, "seq-len");
  c["micro_batch"] = ini_value(ini, "micro-batch");
  c["global_batch"] = ini_value(ini, "global-batch");
  c["micro_batches"] = ini_value(ini, "micro-batches");
  const auto pipeline = reader.pipeline();
  // Micro-batches 0 means "derived": G / (dp * B) (the INI's numbers may be anything).
  int64_t dp_times_b = 0;
  if (c["micro_batches"] == "0" && run.config_int("global_batch") > 0 &&
      run.config_int("micro_batch") > 0 &&
      !__builtin_mul_overflow(mesh[0], run.config_int("micro_batch"), &dp_times_b))
    c["micro_batches"] = std::to_string(run.config_int("global_batch") / dp_times_b);
  if (pipeline && pipeline->micro_batches > 0)
    c["micro_batches"] = std::to_string(pipeline->micro_batches);
  // Split and schedule mean something only for a pipeline (pp > 1; a tp-only run also writes
  // /pipeline): "-" otherwise, so that runs that differ only in an unused default are one
  // configuration, and the table leaves the columns out.
  const bool is_pipeline = mesh[1] > 1;
  if (is_pipeline) {
    c["pp_split"] = pipeline && !pipeline->split.empty() ? pipeline->split : ini_value(ini, "pp-split");
    c["pp_schedule"] =
        pipeline && !pipeline->schedule.empty() ? pipeline->schedule : ini_value(ini, "pp-schedule");
    c["pp_virtual"] = std::to_string(pipeline ? pipeline->virtual_chunks : 1);
  } else {
    c["pp_split"] = "-";
    c["pp_schedule"] = "-";
    c["pp_virtual"] = "-";
  }
  // Layout and schemes mean something only under context parallelism (cp > 1): "-" otherwise.
  // (Files before --cp-scheme have none: the chain; before --cp-attention: ring attention.)
  const bool is_cp = c["cp"] != "1" && c["cp"] != "?";
  c["cp_layout"] = !is_cp ? "-" : ini.count("cp-layout") ? ini_value(ini, "cp-layout") : "zigzag";
  c["cp_scheme"] = !is_cp ? "-" : ini.count("cp-scheme") ? ini_value(ini, "cp-scheme") : "chain";
  c["cp_attention"] =
      !is_cp ? "-" : ini.count("cp-attention") ? ini_value(ini, "cp-attention") : "ring";
  c["precision"] = ini_value(ini, "precision");
  // the storage of frozen weight matrices (--base-dtype, resolved); files before it had fp32
  c["base_dtype"] = ini.count("base-dtype") ? ini_value(ini, "base-dtype") : "fp32";
  c["act_ckpt"] = ini_value(ini, "activation-checkpointing");
  c["gdn_mode"] = ini_value(ini, "gdn-mode");
  // the kernel that ran (auto resolved) when the file says; else the requested --attn-impl
  c["attn_impl"] = model && !model->attn_impl.empty() ? model->attn_impl : ini_value(ini, "attn-impl");
  if (pipeline && is_pipeline) {
    run.bubble_fraction = pipeline->bubble_fraction;
    run.bubble_fraction_theory = pipeline->bubble_fraction_theory;
    if (!std::isnan(pipeline->bubble_fraction_simulated))
      run.bubble_fraction_simulated = pipeline->bubble_fraction_simulated;
  }

  for (const char* a : {schema::kAttrStartUnixS, schema::kAttrStartTime, schema::kAttrSlurmJobId,
                        schema::kAttrSlurmArrayTaskId, schema::kAttrHosts, schema::kAttrConfig}) {
    std::ostringstream v;
    try {  // a missing or odd-typed attribute only weakens the copy detection
      if (std::string(a) == schema::kAttrStartUnixS) v << std::setprecision(17) << reader.attr_double(a);
      else v << reader.attr_string(a);
    } catch (const UserError&) {
    }
    run.job_id += v.str() + '\x1f';
  }

  run.step_numbers = reader.step_numbers();
  for (const auto& metric : analysed_metrics()) {
    if (!reader.has_step_metric(metric)) continue;
    auto m = reader.steps(metric);
    if (m.steps != static_cast<int64_t>(run.step_numbers.size()))
      throw user_error("'", path, "': /steps/", metric, " has ", m.steps, " steps but /steps/step has ",
                       run.step_numbers.size(), " (damaged file)");
    run.per_step[metric] = reduce_over_ranks(m, reduction_for(metric));
  }
  if (run.step_numbers.empty())
    throw user_error("'", path, "' holds no steps (the job ended before its first flush)");
  // the planner's peak: per rank (held + predicted activations), then max over ranks
  if (reader.has_step_metric(schema::kActivationPredicted) &&
      reader.has_step_metric(schema::kParamBytes) && reader.has_step_metric(schema::kGradBytes) &&
      reader.has_step_metric(schema::kOptimizerBytes)) {
    auto sum = reader.steps(schema::kActivationPredicted);
    for (const char* part : {schema::kParamBytes, schema::kGradBytes, schema::kOptimizerBytes}) {
      const auto m = reader.steps(part);
      if (m.steps != sum.steps || m.ranks != sum.ranks) continue;
      for (size_t i = 0; i < sum.values.size(); ++i) sum.values[i] += m.values[i];
    }
    if (sum.steps == static_cast<int64_t>(run.step_numbers.size()))
      run.per_step[kPredictedPeak] = reduce_over_ranks(sum, RankReduction::Max);
  }
  if (const auto model = reader.model()) run.plan_tokens_per_s = model->plan_tokens_per_s;
  // sparse MoE layers: the slots per layer and expert, summed over /experts' steps
  if (const auto experts = reader.experts()) {
    // L x E; tokens_per_expert holds one such table per step, rank_tokens_per_expert one per
    // rank (which also bounds L x E by the file's size before anything is allocated for it)
    int64_t row = 0;
    const uint64_t world = uint64_t(reader.world_size());
    if (experts->experts < 1 || experts->layers.empty() ||
        __builtin_mul_overflow(int64_t(experts->layers.size()), experts->experts, &row) ||
        experts->tokens.size() % uint64_t(row) != 0 || experts->rank_tokens.size() % world != 0 ||
        experts->rank_tokens.size() / world != uint64_t(row))
      throw user_error("'", path, "': /experts holds ", experts->tokens.size(), " and ",
                       experts->rank_tokens.size(), " token counts for ", experts->layers.size(),
                       " layers x ", experts->experts, " experts (damaged file)");
    run.expert_load.experts = experts->experts;
    run.expert_load.layers = experts->layers;
    run.expert_load.tokens.assign(size_t(row), 0);
    for (size_t i = 0; i < experts->tokens.size(); ++i)
      run.expert_load.tokens[i % size_t(row)] += experts->tokens[i];
  }
  if (pipeline && is_pipeline) {  // the trace is read only here: other runs stay cheap to load
    std::vector<std::vector<metrics::TraceEvent>> events(static_cast<size_t>(reader.world_size()));
    for (int r = 0; r < reader.world_size(); ++r) events[static_cast<size_t>(r)] = reader.trace(r);
    try {
      const ScheduleInfo schedule{pipeline->schedule, pipeline->virtual_chunks,
                                  pipeline->micro_batches};
      run.trace_bubble =
          trace_bubble(events, {mesh[0], mesh[1], mesh[2]}, run.step_numbers, &schedule);
    } catch (const UserError& e) {
      throw user_error("'", path, "': ", e.what());
    }
  }
  return run;
}

}  // namespace

LoadResult load_runs(const std::vector<std::string>& files, bool include_incomplete) {
  LoadResult out;
  std::map<std::string, std::string> first_path_of_job;  // job_id -> first file holding it
  for (const auto& path : files) {
    try {
      RunData run = load_one(path);
      auto [it, fresh] = first_path_of_job.emplace(run.job_id, path);
      if (!fresh) {
        out.skipped.push_back({path, "a copy of " + it->second +
                                         " (same job: start time, hosts and configuration); counted once"});
        continue;
      }
      if (!run.complete && !include_incomplete) {
        out.skipped.push_back({path, "incomplete run (complete = 0: killed or still running); "
                                     "use --include-incomplete to include it"});
        continue;
      }
      out.runs.push_back(std::move(run));
    } catch (const std::exception& e) {
      // ResultReader messages already name the file; keep one line.
      std::string why = e.what();
      std::replace(why.begin(), why.end(), '\n', ' ');
      out.skipped.push_back({path, why});
    }
  }
  return out;
}

}  // namespace hlp::analysis
