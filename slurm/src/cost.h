#pragma once
// Cost before submit (issue 38): what a sweep is predicted to use, in GPU-hours and the site's
// service units (SUs), and the most its arrays can use, printed before anything is submitted.
//
//   a configuration  devices x (steps x step_s + startup_s) / 3600 device-hours
//     devices        ranks x GPUs per rank (site.h gpus_per_rank); CPU ranks (local, generic
//                    with gpus-per-task = 0) count as ranks: rank-hours, no SUs
//     step_s         hlp-plan's predicted step time (the median step after the first,
//                    src/train/plan.h); configurations without one are listed, not costed
//     steps          the configuration's `steps` (hlp-train's default when unset)
//     startup_s      job setting startup-s, else kMeasuredStartupS
//   SUs              GPU-hours x the site's charge rate (site.h charge_rate); "no rate" if none
//   worst case       per array: time limit x devices per task x tasks
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "job_file.h"
#include "site.h"
#include "sweep.h"

namespace hlp::sweep {

// Seconds one hlp-train task spends outside its steps (launch, model build, activation probe,
// first-step overheads, the final checkpoint, exit): measured for jet-nemotron-2b, how in
// slurm/README.md ("Cost before submit"). Job setting startup-s replaces it.
inline constexpr double kMeasuredStartupS = 39;

// What hlp-plan predicted of each configuration's step time, and why the others have none.
struct StepTimes {
  std::map<std::string, double> step_s;            // by configuration name
  std::map<std::string, std::string> missing_why;  // by configuration name
  std::string default_missing_why;                 // configurations in neither map
};

struct ConfigCost {
  std::string name;
  int devices = 0;            // GPUs (rank-hours: ranks) the task holds
  int steps = 0;
  double step_s = 0;          // predicted
  double hours = 0;           // device-hours
  bool over_time_limit = false;
};

struct ArrayCost {
  std::string script;         // "<sweep>-n<ranks>.sbatch"
  int tasks = 0;
  int devices_per_task = 0;
  double hours = 0;           // every task to the time limit
};

struct SweepCost {
  std::string sweep;
  bool gpu = true;                   // false: CPU ranks, rank-hours and no SUs
  std::string gpu_type;              // "" when the site does not name one
  std::string site_section;          // where su-per-gpu-hour would go: "[generic]"
  std::optional<ChargeRate> rate;    // nullopt on a GPU site: "no rate"
  double startup_s = 0;
  bool startup_measured = true;      // false: the job file's startup-s
  std::string time_limit;            // as the job file gives it ("01:00:00")
  double time_limit_s = 0;           // infinity: no limit (UNLIMITED)
  std::vector<ConfigCost> costed;    // sweep order
  std::vector<std::pair<std::string, std::vector<std::string>>> not_costed;  // why -> names
  std::vector<ArrayCost> arrays;     // one per shape
  double predicted_hours = 0;        // sum over `costed`
  double worst_hours = 0;            // sum over `arrays`
};

// Seconds of a Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; infinity
// for UNLIMITED / INFINITE. Throws UserError naming `where` for anything else.
double slurm_time_limit_s(const std::string& text, const std::string& where);

// Throws UserError for a startup-s, su-per-gpu-hour or time that is not usable.
SweepCost estimate_cost(Site site, const JobFile& job, const Sweep& sweep, const StepTimes& times,
                        const std::string& gpu_type);

// The lines hlp-sweep prints (and writes to cost.txt): a heading, one line per configuration,
// the configurations not costed, the predicted total, the worst case per array and in all.
std::vector<std::string> cost_lines(const SweepCost& cost);

}  // namespace hlp::sweep
