// hlp-analyze: result files (HDF5, one per job) -> configuration tables, gnuplot figures and
// Perfetto traces. Serial; no MPI_Init (the reader uses serial HDF5).
#include <boost/program_options.hpp>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "analysis/aggregate.h"
#include "analysis/gnuplot.h"
#include "analysis/report.h"
#include "analysis/run_loader.h"
#include "analysis/table_writer.h"
#include "cli/program_options_error.h"
#include "common/error.h"
#include "metrics/trace_export.h"

namespace po = boost::program_options;
namespace an = hlp::analysis;

namespace {

const char* kUsage =
    "hlp-analyze — turn HLP result files (one HDF5 file per hlp-train job) into a report.\n"
    "\n"
    "Usage:\n"
    "  hlp-analyze table  DIR_OR_FILES... [--format md|csv] [--warmup N] [--include-incomplete]\n"
    "      One row per configuration on stdout (Markdown; CSV with --format csv or --csv).\n"
    "  hlp-analyze report DIR_OR_FILES... -o OUTDIR [--warmup N] [--include-incomplete]\n"
    "                     [--su-per-gpu-hour R] [--sweep SWEEP_DIR]\n"
    "      OUTDIR/index.md: Findings first (fastest and leanest per group of comparable runs,\n"
    "      ties within the step-to-step spread, the Pareto front, one reason line per\n"
    "      configuration from its breakdown, what was not measured), the headline table (also\n"
    "      headline.md and LaTeX table.tex), the cost in GPU- / rank-hours (service units with\n"
    "      --su-per-gpu-hour), the full table (table.md, table.csv) and gnuplot figures (NAME.png,\n"
    "      NAME.svg, editable NAME.gp + NAME.dat). With --sweep (hlp-sweep's --out), the sweep's\n"
    "      configurations without a result file and those its planner left out are listed.\n"
    "      Without gnuplot on PATH the figures' .dat and .gp are written, not rendered (a note).\n"
    "  hlp-analyze trace  FILE.h5 -o trace.json\n"
    "      Chrome / Perfetto trace of one job (pid = rank; compute / comm / data lanes).\n"
    "\n"
    "Directories are searched recursively for *.h5. A configuration is everything that defines\n"
    "the experiment (strategy, mesh dp/pp/tp/cp/ep, world size, device, model, pattern, LoRA rank,\n"
    "sequence length, micro-batch, global batch, micro-batches, pipeline split, schedule and V,\n"
    "cp layout, state and attention schemes, precision, base dtype (the storage of frozen\n"
    "weights), activation checkpointing, GDN mode) — not the seed, step count or paths.\n"
    "Reruns of one configuration are combined: their steps after warm-up are pooled, and the\n"
    "`runs` column counts them. Per step, ranks are reduced first (max for times and bytes, min for\n"
    "tokens/s and MFU, mean for loss); medians and [min, max] are then over the pooled steps.\n"
    "tokens/s is GLOBAL; tokens/s per device = global / world size; peak bytes = max over\n"
    "ranks, steps and runs; exposed comm fraction = comm_exposed_s / step_time_s; MFU in both\n"
    "conventions (model FLOPs 6N+mixing, executed FLOPs); pipeline bubble three ways: the\n"
    "strategy's in-process value (/pipeline), the one measured from the trace (idle share of\n"
    "each step's pipeline window, see analysis/README.md) and the schedule's own theory\n"
    "(docs/strategies.md: (p-1)/(m+p-1) for gpipe/1f1b, / V for interleaved, zero bubble's).\n"
    "Models with sparse MoE layers add expert imbalance (busiest expert / mean, worst layer of\n"
    "the step), all-to-all MiB per step and the figure expert_load. Runs with cp >= 2 add the\n"
    "figures cp_schemes_cp<N>: step time and exposed comm vs T per pair of cp schemes.\n"
    "\n"
    "Truncated, corrupt, foreign or incomplete (complete = 0) files are reported on stderr in\n"
    "one line each and skipped; a copy of a file already read (same job) is counted once.\n"
    "No usable file at all is an error (exit 1).\n";

struct Common {
  std::vector<std::string> inputs;
  int64_t warmup = 1;
  bool include_incomplete = false;
};

po::options_description common_options(Common& c) {
  po::options_description d("Options", 100);
  d.add_options()("help,h", "print help and exit")(
      "warmup", po::value<int64_t>(&c.warmup)->default_value(1),
      "steps left out at the start of each run before medians (at least one step is kept)")(
      "include-incomplete", po::bool_switch(&c.include_incomplete),
      "also use runs with complete = 0 (killed jobs: every flushed step)");
  return d;
}

po::variables_map parse(int argc, char** argv, po::options_description& visible,
                        std::vector<std::string>& inputs) {
  po::options_description hidden;
  hidden.add_options()("inputs", po::value<std::vector<std::string>>(&inputs));
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description pos;
  pos.add("inputs", -1);
  po::variables_map vm;
  try {
    // argv[1] is the subcommand: parse from argv[1] on, treating it as the program name.
    po::store(po::command_line_parser(argc - 1, argv + 1).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (po::error& e) {
    throw hlp::user_error(argv[1], ": ", hlp::cli::program_options_message(e), " (see hlp-analyze --help)");
  }
  return vm;
}

// Loads, reports skipped files on stderr, fails when nothing usable is left.
std::vector<an::ConfigRow> load_and_aggregate(const Common& c, std::vector<an::Skip>* skipped_out) {
  if (c.inputs.empty())
    throw hlp::user_error("no inputs: give result directories or .h5 files (see hlp-analyze --help)");
  if (c.warmup < 0) throw hlp::user_error("--warmup must be >= 0, got ", c.warmup);
  const auto files = an::find_result_files(c.inputs);
  auto loaded = an::load_runs(files, c.include_incomplete);
  for (const auto& s : loaded.skipped) {
    // The reader's messages already name the file; others get it prepended.
    const bool named = s.reason.find(s.path) != std::string::npos;
    std::cerr << "hlp-analyze: skipping " << (named ? "" : s.path + ": ") << s.reason << "\n";
  }
  if (loaded.runs.empty())
    throw hlp::user_error("no usable result files among ", files.size(), " file(s) found in the inputs",
                          files.empty() ? " (no *.h5 found; give result directories or .h5 files)"
                                        : " (every file was skipped, see above)");
  if (skipped_out) *skipped_out = loaded.skipped;
  return an::aggregate(loaded.runs, c.warmup);
}

int cmd_table(int argc, char** argv) {
  Common c;
  bool csv = false;
  std::string format = "md";
  auto d = common_options(c);
  d.add_options()("format", po::value<std::string>(&format)->default_value("md"),
                  "md (Markdown, for people) or csv (every column, full precision)")(
      "csv", po::bool_switch(&csv), "the same as --format csv");
  auto vm = parse(argc, argv, d, c.inputs);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << d;
    return 0;
  }
  if (format != "md" && format != "csv")
    throw hlp::user_error("table: --format must be md or csv, got '", format, "'");
  csv = csv || format == "csv";
  const auto rows = load_and_aggregate(c, nullptr);
  if (csv) an::write_csv(std::cout, rows);
  else an::write_markdown(std::cout, rows, c.warmup);
  return 0;
}

int cmd_report(int argc, char** argv) {
  Common c;
  std::string outdir;
  an::ReportOptions options;
  auto d = common_options(c);
  d.add_options()("out,o", po::value<std::string>(&outdir), "output directory (created)")(
      "su-per-gpu-hour", po::value<double>(&options.su_per_gpu_hour),
      "service units charged per GPU-hour (the site's rate): the cost section shows SUs")(
      "sweep", po::value<std::string>(&options.sweep_dir),
      "the sweep's output directory (hlp-sweep --out): list its configurations that left no "
      "result file and those its planner left out (pruned.txt)");
  auto vm = parse(argc, argv, d, c.inputs);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << d;
    return 0;
  }
  if (outdir.empty()) throw hlp::user_error("report: -o OUTDIR is required");
  std::vector<an::Skip> skipped;
  const auto rows = load_and_aggregate(c, &skipped);
  if (vm.count("su-per-gpu-hour") && !(options.su_per_gpu_hour > 0))
    throw hlp::user_error("report: --su-per-gpu-hour must be a positive number, got ",
                          options.su_per_gpu_hour);
  options.warmup_steps = c.warmup;
  const auto s = an::write_report(rows, skipped, outdir, options);
  if (!s.gnuplot) std::cerr << "hlp-analyze: note: " << an::no_gnuplot_note() << "\n";
  std::cerr << "hlp-analyze: wrote " << outdir << "/index.md (" << rows.size()
            << " configurations, " << s.figures_rendered << " figures, " << s.figures_skipped
            << " skipped for lack of data, " << s.not_measured << " not measured)\n";
  return 0;
}

int cmd_trace(int argc, char** argv) {
  std::string out;
  std::vector<std::string> inputs;
  po::options_description d("Options", 100);
  d.add_options()("help,h", "print help and exit")("out,o", po::value<std::string>(&out),
                                                     "trace JSON to write");
  auto vm = parse(argc, argv, d, inputs);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << d;
    return 0;
  }
  if (inputs.size() != 1) throw hlp::user_error("trace: give exactly one FILE.h5 (got ", inputs.size(), ")");
  if (out.empty()) throw hlp::user_error("trace: -o trace.json is required");
  const auto stats = hlp::metrics::export_chrome_trace(inputs[0], out);
  std::cerr << "hlp-analyze: wrote " << out << " (" << stats.complete_events << " events, "
            << stats.counter_events << " counters); open it in https://ui.perfetto.dev\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::cout << kUsage;
      return cmd.empty() ? 1 : 0;
    }
    if (cmd == "table") return cmd_table(argc, argv);
    if (cmd == "report") return cmd_report(argc, argv);
    if (cmd == "trace") return cmd_trace(argc, argv);
    throw hlp::user_error("unknown command '", cmd, "': use table, report or trace (hlp-analyze --help)");
  } catch (const hlp::UserError& e) {
    std::cerr << "hlp-analyze: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "hlp-analyze: internal error: " << e.what() << "\n";
    return 2;
  }
}
