// hlp-plan: which strategies fit, and which is fastest, before spending GPU hours (issue 24).
// Takes hlp-train's model, data-shape, LoRA, precision, checkpointing, attention and kernel
// options (or --config FILE.ini), plus its own --ranks, --gpu, --strategies and --format;
// prints every candidate's predicted per-rank peak (parameters, gradients, optimizer, working
// set, activations, communication buffers, reserve), whether it fits, its predicted step time
// and tokens/s, ranked. The method and its numbers: src/train/plan.h.
#include <unistd.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"
#include "common/printable.h"
#include "data/tokenizer.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/result_reader.h"
#include "metrics/schema.h"
#include "metrics/torch_info.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/precision.h"
#include "parallel/registry.h"
#include "train/plan.h"
#include "train/thread_pools.h"
#include "train/trainer.h"

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

const char* kUsage =
    "hlp-plan: predict memory per rank and step time of every strategy before running it\n"
    "\n"
    "usage: hlp-plan [hlp-train options] [--ranks N[,N...]] [--gpu TYPE] [--strategies LIST]\n"
    "                [--format table|csv]\n"
    "  --ranks N,...       world sizes to plan for (default 2); with N >= 2, `single` on one\n"
    "                      rank is listed for reference\n"
    "  --gpu TYPE          v100-16 | v100-32 | a100-40 | a100-80 | h100-80 | h200 | l40s-48 |\n"
    "                      cpu (this machine's memory shared by the ranks; default)\n"
    "  --strategies LIST   comma-separated subset of single,ddp,fsdp,fsdp2,pp,tp,cp (default:\n"
    "                      every strategy and mesh the rank count allows: pipeline schedules,\n"
    "                      dp x pp, dp x tp, dp x cp included)\n"
    "  --format F          table (markdown, ranked; default) or csv\n"
    "  --runs FILE         plan exactly the runs FILE lists, one a line: RANKS CONFIG.ini (hlp-train\n"
    "                      configurations, e.g. a sweep's rendered ones); CSV rows in the file's\n"
    "                      order, the line's index first (column run); runs that differ only in\n"
    "                      strategy and mesh share their probes\n"
    "  --calibrate DIR     fit the compute efficiency and the link bandwidth (two scales of the\n"
    "                      --gpu numbers) to the measured step times of the result files in DIR\n"
    "                      (on the CPU at the peak each run measured); prints each run's error\n"
    "                      before and after\n"
    "hlp-train's options (--model, --seq-len, --global-batch, --micro-batch, --lora-rank,\n"
    "--precision, --activation-checkpointing, --pp-split, --cp-layout, --config FILE.ini ...)\n"
    "describe the run; see hlp-train --help. The layer kinds' activations are probed on this\n"
    "machine's CPU at short lengths and extrapolated (src/train/plan.h says what is modelled).\n";

// The model and LoRA of a configuration as hlp-train resolves them; the probe runs on the CPU.
// gpu: the target device type ("cpu" for CPU ranks): `--kernels auto` resolves to what
// hlp-train would run there (lean on a GPU, fused on the CPU).
hlp::train::PlanInputs inputs_for(const hlp::train::TrainConfig& c, const std::string& gpu) {
  using namespace hlp;
  train::PlanInputs in;
  in.train = c;
  auto run_model = train::resolve_run_model(c, data::make_tokenizer(c.tokenizer)->vocab_size());
  if (!run_model.vocab_warning.empty()) {  // once per model and tokenizer
    static std::set<std::string> said;
    if (said.insert(run_model.vocab_warning).second)
      std::fprintf(stderr, "hlp-plan: warning: %s\n", run_model.vocab_warning.c_str());
  }
  in.model = run_model.model;
  in.model.kernels = model::resolve_kernels(c.kernels, /*cuda=*/gpu != "cpu");
  in.train.kernels = in.model.kernels;
  in.lora = run_model.lora;
  // auto / sdpa resolve to the blocked kernel on the CPU (linear memory, as sdpa's flash /
  // memory-efficient kernels on a GPU)
  if (in.model.attn_impl != model::AttnImpl::naive) in.model.attn_impl = model::AttnImpl::blocked;
  return in;
}

// hlp-train's configuration in `path`, parsed by hlp-train's own parser.
hlp::train::TrainConfig config_file(const std::string& path) {
  const char* args[] = {"hlp-plan", "--config", path.c_str()};
  auto parsed = hlp::cli::parse_train_args(3, args);
  return parsed.config;
}

int calibrate_from(const std::string& dir, const std::string& gpu_override) {
  using namespace hlp;
  std::vector<train::CalibrationRun> runs;
  std::vector<std::string> files;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw user_error("--calibrate ", dir, ": not a directory (give the directory of the result files)");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".h5") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::map<std::string, train::PlanDevice> devices;
  for (const auto& path : files) {
    metrics::ResultReader reader(path);
    if (!reader.has_attr(metrics::schema::kAttrConfig) || reader.num_steps() < 2) continue;
    // the run's configuration back through hlp-train's own parser
    char tmp[] = "/tmp/hlp-plan-XXXXXX";
    const int fd = mkstemp(tmp);
    if (fd < 0) throw user_error("--calibrate: cannot create a temporary file in /tmp");
    close(fd);
    std::ofstream(tmp) << reader.attr_string(metrics::schema::kAttrConfig);
    const train::TrainConfig parsed = config_file(tmp);
    std::remove(tmp);
    const int world = reader.world_size();
    const auto c = train::with_parallel_defaults(parsed, world);
    const std::string gpu =
        gpu_override.empty()
            ? train::plan_device_of(reader.attr_string(metrics::schema::kAttrDeviceKind),
                             reader.attr_string(metrics::schema::kAttrDeviceName))
            : gpu_override;
    if (gpu.empty()) continue;
    // A CPU run's own peak (hlp-train measured it at start with the run's threads), not one
    // measured now with hlp-plan's: the fit then scales what the run's prediction used.
    double peak = 0;
    std::string peak_source;
    if (gpu == "cpu" && reader.has_attr(metrics::schema::kAttrPeakFlopsPerDevice)) {
      peak = reader.attr_double(metrics::schema::kAttrPeakFlopsPerDevice);
      if (reader.has_attr(metrics::schema::kAttrPeakFlopsSource))
        peak_source = reader.attr_string(metrics::schema::kAttrPeakFlopsSource) + " (from " +
                      std::filesystem::path(path).filename().string() + ")";
      if (!(peak > 0) || !std::isfinite(peak)) peak = 0;  // missing or damaged: measure here
    }
    const std::string device_key = gpu + "/" + model::to_string(c.precision) + "/" +
                                   std::to_string(world) + "/" +
                                   std::to_string(peak);
    if (!devices.count(device_key))
      devices[device_key] = train::plan_device(gpu, c.precision, world, peak, peak_source);
    train::CalibrationRun run;
    run.path = path;
    run.inputs = inputs_for(c, gpu);
    run.inputs.device = devices.at(device_key);
    run.shape = train::run_shape(run.inputs, world);
    run.label = run.shape.candidate.name() + " T " + std::to_string(c.seq_len) +
                (c.activation_checkpointing ? " ckpt" : "") + " (" +
                std::filesystem::path(path).filename().string() + ")";
    const auto steps = reader.steps(metrics::schema::kStepTime);
    std::vector<double> slowest;
    for (int64_t s = 1; s < steps.steps; ++s) {
      double most = 0;
      for (int64_t r = 0; r < steps.ranks; ++r) most = std::max(most, steps.at(r, s));
      slowest.push_back(most);
    }
    std::nth_element(slowest.begin(), slowest.begin() + slowest.size() / 2, slowest.end());
    run.measured_step_s = slowest[slowest.size() / 2];
    if (!(run.measured_step_s > 0)) continue;
    runs.push_back(std::move(run));
  }
  if (runs.empty()) throw user_error("--calibrate ", dir, ": no result file with 2 or more steps of a known device");
  const train::Calibration cal = train::calibrate(runs);
  std::printf("hlp-plan --calibrate %s: %zu runs\n", dir.c_str(), runs.size());
  std::printf("| run | measured step s | predicted before | before / measured | predicted after | after / measured |\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < runs.size(); ++i)
    std::printf("| %s | %.4g | %.4g | %.2f | %.4g | %.2f |\n", runs[i].label.c_str(),
                runs[i].measured_step_s, runs[i].predicted_before_step_s,
                runs[i].predicted_before_step_s / runs[i].measured_step_s,
                runs[i].predicted_step_s, runs[i].predicted_step_s / runs[i].measured_step_s);
  std::printf("mean |log(predicted / measured)|: %.3f before, %.3f after; fitted: efficiency x %.3f "
              "(%.3f of peak), link bandwidth x %.3g\n",
              cal.error_before, cal.error_after, cal.efficiency_scale,
              runs.front().inputs.device.efficiency * cal.efficiency_scale, cal.link_scale);
  return 0;
}

// The planner's device for `ranks` ranks of configuration `c`. On the CPU the sgemm peak is
// measured with the compute threads one rank gets (--threads, or hlp-train's default for that
// many ranks on this machine), as hlp-train measures it for the prediction it records.
hlp::train::PlanDevice device_for(const std::string& gpu, const hlp::train::TrainConfig& c, int ranks) {
  if (gpu != "cpu") return hlp::train::plan_device(gpu, c.precision, ranks);
  static std::map<int, hlp::metrics::PeakFlops> measured;  // by threads
  const int threads = c.threads > 0 ? c.threads : hlp::train::default_threads(ranks);
  if (!measured.count(threads)) {
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    measured[threads] = hlp::metrics::measure_cpu_peak_flops(0.3);
    measured[threads].source += " (" + std::to_string(threads) + " thread(s), one rank's)";
    at::set_num_threads(before);
  }
  return hlp::train::plan_device(gpu, c.precision, ranks, measured[threads].flops_per_s,
                                 measured[threads].source);
}

// What the activation probe of a configuration depends on: the configuration as hlp-train
// writes it back (to_ini) with its mesh, schedule, output and step settings and its sequence
// length at their defaults (runs that differ only there share their probes: plan() keys them by
// the lengths probed, which is all a probe takes of T).
std::string probe_fingerprint(hlp::train::TrainConfig c) {
  const hlp::train::TrainConfig defaults;
  c.strategy = defaults.strategy;
  c.tp = defaults.tp;
  c.pp = defaults.pp;
  c.cp = defaults.cp;
  c.pp_schedule = defaults.pp_schedule;
  c.pp_virtual = defaults.pp_virtual;
  c.pp_split = defaults.pp_split;
  c.out = defaults.out;
  c.checkpoint_dir = defaults.checkpoint_dir;
  c.trace = defaults.trace;
  c.steps = defaults.steps;
  c.warmup_steps = defaults.warmup_steps;
  c.checkpoint_every = defaults.checkpoint_every;
  c.resume = defaults.resume;
  c.seed = defaults.seed;
  c.lr = defaults.lr;
  c.seq_len = defaults.seq_len;
  return hlp::cli::to_ini(c);
}

int plan_runs(const std::string& list_path, const std::string& gpu) {
  using namespace hlp;
  std::ifstream list(list_path);
  if (!list) throw user_error("--runs ", list_path, ": cannot read it");
  train::ProbeCache cache;
  std::string line;
  bool header = true;
  for (int index = 0; std::getline(list, line); ++index) {
    std::istringstream fields(line);
    long world = 0;
    std::string path;
    if (!(fields >> world) || world < 1 || world > 65536)
      throw user_error("--runs ", list_path, " line ", index + 1, ": want 'RANKS CONFIG.ini' (got '",
                       printable(line, 200), "')");
    std::getline(fields >> std::ws, path);
    if (path.empty())
      throw user_error("--runs ", list_path, " line ", index + 1, ": no configuration file after the ranks");
    const train::TrainConfig c = config_file(path);
    train::PlanInputs in = inputs_for(c, gpu);
    in.device = device_for(gpu, c, int(world));
    in.probe_fingerprint = probe_fingerprint(c);
    std::vector<train::PlanRow> rows;
    const train::PlanCandidate candidate = train::candidate_of_run(c, int(world));
    try {  // a run hlp-train would refuse is a row with its reason, not the end of the list
      rows = train::plan(in, {candidate}, &cache);
    } catch (const UserError& e) {
      rows.assign(1, train::PlanRow{});
      rows[0].candidate = candidate;
      rows[0].problem = e.what();
    }
    for (auto& r : rows)  // the CSV quotes nothing: keep the free-text column on one line
      for (char& ch : r.problem)
        if (ch == '\n') ch = ' ';
    const std::string text = train::format_plan(rows, in, true);
    const size_t body = text.find('\n') + 1;
    if (header) std::cout << "run," << text.substr(0, body);
    header = false;
    std::cout << index << "," << text.substr(body) << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hlp;
  try {
    std::vector<std::string> ranks_text{"2"};
    std::string gpu = "cpu", strategies, format = "table", calibrate_dir, runs_path;
    bool gpu_given = false;
    std::vector<const char*> rest{argv[0]};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&](const char* option) {
        const std::string prefix = std::string(option) + "=";
        if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
        if (i + 1 >= argc) throw user_error(option, " needs a value");
        return std::string(argv[++i]);
      };
      auto is = [&](const char* option) {
        return a == option || a.rfind(std::string(option) + "=", 0) == 0;
      };
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (is("--ranks")) {
        ranks_text = split_list(value("--ranks"));
      } else if (is("--gpu")) {
        gpu = value("--gpu");
        gpu_given = true;
      } else if (is("--runs")) {
        runs_path = value("--runs");
      } else if (is("--calibrate")) {
        calibrate_dir = value("--calibrate");
      } else if (is("--strategies")) {
        strategies = value("--strategies");
      } else if (is("--format")) {
        format = value("--format");
      } else {
        rest.push_back(argv[i]);
      }
    }
    if (!calibrate_dir.empty()) {
      metrics::CpuAllocatorCounter::install();
      return calibrate_from(calibrate_dir, gpu_given ? gpu : "");
    }
    if (!runs_path.empty()) {
      metrics::CpuAllocatorCounter::install();  // the probe measures with it
      return plan_runs(runs_path, gpu);
    }
    if (format != "table" && format != "csv")
      throw user_error("--format must be table or csv (got ", format, ")");
    std::vector<int> ranks;
    for (const auto& r : ranks_text) {
      char* end = nullptr;
      const long n = std::strtol(r.c_str(), &end, 10);
      if (end == r.c_str() || *end != '\0' || n < 1 || n > 65536)
        throw user_error("--ranks takes world sizes from 1 to 65536 (got '", r, "')");
      ranks.push_back(int(n));
    }
    std::vector<parallel::StrategyKind> wanted;
    for (const auto& s : split_list(strategies)) {
      try {
        wanted.push_back(parallel::parse_strategy(s));
      } catch (const UserError&) {
        std::string names;
        for (const auto& n : parallel::strategy_names()) names += (names.empty() ? "" : ", ") + n;
        throw user_error("--strategies: unknown strategy '", printable(s), "' (", names, ")");
      }
    }
    auto parsed = cli::parse_train_args(int(rest.size()), rest.data());
    if (parsed.action == cli::Action::Help) {
      std::cout << kUsage;
      return 0;
    }
    const train::TrainConfig& c = parsed.config;

    metrics::CpuAllocatorCounter::install();  // the probe measures with it
    train::PlanInputs in = inputs_for(c, gpu);
    for (size_t i = 0; i < ranks.size(); ++i) {
      in.device = device_for(gpu, c, ranks[i]);
      const auto candidates = train::plan_candidates(ranks[i], in.model, c, wanted);
      const auto rows = train::plan(in, candidates);
      const std::string text = train::format_plan(rows, in, format == "csv");
      // one CSV header for all rank counts
      if (format == "csv" && i > 0) std::cout << text.substr(text.find('\n') + 1);
      else std::cout << text << (format == "table" ? "\n" : "");
    }
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "hlp-plan: error: %s\n", printable(e.what(), std::string::npos).c_str());
    return 2;
  }
}
