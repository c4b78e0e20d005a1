// hlp-sweep: experiment file -> Slurm job arrays (+ analysis job), submitted or run locally.
//
//   hlp-sweep jobs/local.ini --site local --out out/local --run-local
//   hlp-sweep jobs/report-psc.ini --site psc-bridges2 --out slurm/out/report-psc --submit
#include <unistd.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "cli/program_options_error.h"
#include "common/error.h"
#include "cost.h"
#include "finished.h"
#include "launch.h"
#include "plan_prune.h"
#include "render.h"
#include "site.h"
#include "sweep.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace hlp::sweep;

namespace {

// The directory of this executable: hlp-train and hlp-analyze are built next to it.
std::string own_bin_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// hlp-plan's step times of the kept configurations, and why the others have none.
StepTimes step_times(const PlanPrune& prune, const Sweep& sweep, bool cpu_ranks, bool no_plan,
                     const std::string& gpu, bool have_plan_bin) {
  StepTimes times;
  times.step_s = prune.step_s;
  for (const PrunedConfig& p : prune.unplanned) times.missing_why[p.name] = p.why;
  for (const Config& c : sweep.configs)
    if (c.value("device") != "cuda" && !gpu.empty())
      times.missing_why[c.name] = "device is not cuda; hlp-plan plans GPU configurations only";
  times.default_missing_why = cpu_ranks       ? "CPU ranks; hlp-plan plans GPU configurations only"
                              : gpu.empty()    ? "no gpu-type to plan for"
                              : no_plan        ? "--no-plan"
                              : !have_plan_bin ? "no executable hlp-plan"
                                               : "hlp-plan gave none";
  return times;
}

int run(int argc, char** argv) {
  std::string job_path, site_text, out_dir, hlp_bin, template_dir, mpiexec, results_dir, report_dir;
  bool submit = false, run_local = false, list = false, no_plan = false, rerun = false;
  po::options_description options(
      "hlp-sweep JOBFILE --site local|psc-bridges2|generic [--out DIR] [--submit | --run-local]\n"
      "Expands an experiment file (jobs/README.md) into one Slurm job array per resource shape plus\n"
      "an analysis job, written to DIR, and prints their predicted GPU-hours and service units and the\n"
      "worst case (slurm/README.md, \"Cost before submit\"); --submit submits them, --run-local runs\n"
      "them here with mpiexec.\n"
      "Options");
  options.add_options()
      ("help,h", "print this help")
      ("site", po::value(&site_text)->required(), "local, psc-bridges2 or generic (#SBATCH lines, partitions)")
      ("out", po::value(&out_dir), "directory of the rendered sweep (default slurm/out/<sweep name>)")
      ("submit", po::bool_switch(&submit), "sbatch the arrays, then the analysis job (afterany: once every task ended); print the job ids")
      ("run-local", po::bool_switch(&run_local), "no Slurm: run each configuration with mpiexec -n <ranks>, then hlp-analyze")
      ("results-dir", po::value(&results_dir), "where the .h5 files go (default: the job file's results-dir, inside --out)")
      ("report-dir", po::value(&report_dir), "where the report goes (default: the job file's report-dir, inside --out)")
      ("list", po::bool_switch(&list), "print the configurations and exit (writes nothing)")
      ("rerun", po::bool_switch(&rerun), "run every configuration again, also those whose result file is already complete (by default they are left out, listed once)")
      ("no-plan", po::bool_switch(&no_plan), "keep every GPU configuration (by default hlp-plan predicts each one's memory per rank on the site's gpu-type and those that cannot fit are left out)")
      ("hlp-bin", po::value(&hlp_bin), "directory with hlp-train and hlp-analyze (default: next to hlp-sweep)")
      ("templates", po::value(&template_dir)->default_value(HLP_SWEEP_TEMPLATE_DIR), "directory of the sbatch templates")
      ("mpiexec", po::value(&mpiexec)->default_value(HLP_SWEEP_LOCAL_MPIEXEC), "MPI launcher for --run-local (default: this build's, hlp-mpiexec)");
  po::options_description hidden;
  hidden.add_options()("job-file", po::value(&job_path));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("job-file", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (po::error& e) {
    throw hlp::user_error(hlp::cli::program_options_message(e), " (see hlp-sweep --help)");
  }
  if (job_path.empty()) throw hlp::user_error("no job file given (usage: hlp-sweep JOBFILE --site SITE ...)");
  if (submit && run_local) throw hlp::user_error("--submit and --run-local exclude each other; pick one");

  const Site site = parse_site(site_text);
  const JobFile job = read_job_file(job_path);
  Sweep sweep = expand_sweep(job);
  for (const std::string& warning : vocabulary_warnings(sweep))
    std::cerr << "hlp-sweep: warning: " << warning << "\n";
  if (list) {
    for (const Config& config : sweep.configs) std::cout << config.name << "\n";
    return 0;
  }

  RenderOptions render;
  render.site = site;
  render.out_dir = out_dir.empty() ? "slurm/out/" + sweep.name : out_dir;
  render.hlp_bin = fs::absolute(hlp_bin.empty() ? own_bin_dir() : hlp_bin).lexically_normal().string();
  render.template_dir = template_dir;
  render.results_dir = results_dir;
  render.report_dir = report_dir;
  if (!rerun) {  // idempotent: what finished stays finished, nothing of it is overwritten
    const std::string results = results_dir_for(job, render);
    const auto finished = skip_finished(sweep, results);
    if (!finished.empty()) {
      std::cout << "finished (complete result file in " << results << ", left out; --rerun runs them again):";
      for (const std::string& name : finished) std::cout << " " << name;
      std::cout << "\n";
    }
    if (sweep.configs.empty()) {
      std::cout << "sweep '" << sweep.name << "': every configuration has a complete result; "
                << "nothing to run (the report: hlp-analyze report " << results << "; --rerun "
                << "to run them again)\n";
      return 0;
    }
  }
  PlanPrune prune;
  const std::string gpu = site_gpu_type(site_name(site), job);
  const std::string plan_bin = (fs::path(render.hlp_bin) / "hlp-plan").string();
  const bool have_plan_bin = access(plan_bin.c_str(), X_OK) == 0;
  if (!no_plan && !gpu.empty()) {
    if (!have_plan_bin) {
      std::cout << "no executable hlp-plan in " << render.hlp_bin << ": the configurations are not "
                << "checked against a " << gpu << "'s memory (build hlp-plan, or pass --no-plan)\n";
    } else {
      prune = prune_by_plan(sweep, job, gpu, plan_bin, (fs::path(render.out_dir) / "plan").string());
      for (const PrunedConfig& p : prune.pruned)
        std::cout << "  left out " << p.name << ": " << p.why << "\n";
      for (const PrunedConfig& p : prune.unplanned)
        std::cout << "  not planned " << p.name << " (kept): " << p.why << "\n";
    }
  }
  const bool cpu_ranks = gpus_per_rank(site, job) == 0;
  const StepTimes times = step_times(prune, sweep, cpu_ranks, no_plan, gpu, have_plan_bin);
  const SweepCost cost = estimate_cost(site, job, sweep, times, gpu);  // errors before writing
  const RenderedSweep rendered = render_sweep(job, sweep, render);
  if (!prune.gpu.empty()) {
    std::ofstream pruned(fs::path(rendered.sweep_dir) / "pruned.txt");
    pruned << "# configurations hlp-plan predicted not to fit on a " << prune.gpu
           << " (left out of the arrays); predictions of all: plan/plan.csv\n";
    for (const PrunedConfig& p : prune.pruned) pruned << p.name << ": " << p.why << "\n";
  }

  std::cout << "sweep '" << sweep.name << "': " << sweep.configs.size() << " configurations ("
            << sweep.excluded << " excluded"
            << (prune.gpu.empty() ? std::string()
                                  : ", " + std::to_string(sweep.pruned) + " predicted not to fit on " +
                                        prune.gpu + " left out")
            << ") in " << sweep.shapes.size() << " job array(s), site "
            << site_name(site) << ", written to " << rendered.sweep_dir << "\n";
  for (size_t i = 0; i < sweep.shapes.size(); ++i)
    std::cout << "  " << std::left << std::setw(30) << rendered.array_scripts[i] << " "
              << sweep.shapes[i].config_indices.size() << " task(s) of " << sweep.shapes[i].ranks << " rank(s)\n";
  std::cout << "  " << std::left << std::setw(30) << rendered.analysis_script << " "
            << "hlp-analyze report, once every task ended\n";
  {
    std::ofstream cost_file(fs::path(rendered.sweep_dir) / "cost.txt");
    for (const std::string& line : cost_lines(cost)) {
      std::cout << line << "\n";
      cost_file << line << "\n";
    }
  }

  if (run_local) {
    LocalRunOptions local{render.hlp_bin, mpiexec};
    return run_sweep_locally(sweep, rendered, local) == 0 ? 0 : 1;
  }
  if (submit) {
    std::string arrays;
    for (const SubmittedJob& job_id : submit_sweep(sweep, rendered)) {
      std::cout << "submitted " << job_id.kind << " " << job_id.script << ": job " << job_id.job_id << "\n";
    }
    std::cout << "job ids: " << rendered.sweep_dir << "/submitted.txt\n"
              << "results: " << rendered.results_dir << "\nreport:  " << rendered.report_dir
              << "\nlogs:    " << rendered.log_dir << "\n";
    return 0;
  }
  std::cout << "to submit: bash " << rendered.submit_script << "   (or run hlp-sweep again with --submit)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const hlp::UserError& e) {
    std::cerr << "hlp-sweep: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hlp-sweep: internal error: " << e.what() << "\n";
    return 3;
  }
}
