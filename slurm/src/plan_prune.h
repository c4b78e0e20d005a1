#pragma once
// Leaving out what cannot fit: before a sweep is rendered, hlp-plan predicts every GPU
// configuration's peak memory per rank on the site's GPU type (hlp-plan --runs: the rendered
// hlp-train configurations themselves, probed on this machine's CPU), and the configurations
// predicted not to fit are dropped from the job arrays, each listed once with its prediction.
#include <map>
#include <string>
#include <vector>

#include "job_file.h"
#include "sweep.h"

namespace hlp::sweep {

struct PrunedConfig {
  std::string name;
  std::string why;  // "predicted 91.3 GiB + 4.6 GiB reserve > 80.0 GiB of a h100-80"
};

struct PlanPrune {
  std::string gpu;                    // the GPU type planned for ("" when nothing was planned)
  int planned = 0;                    // configurations hlp-plan predicted
  std::vector<PrunedConfig> pruned;   // left out of the arrays
  std::vector<PrunedConfig> unplanned;  // kept without a prediction (hlp-plan gave no row)
  std::map<std::string, double> step_s;  // kept configurations: hlp-plan's predicted step time, by name
};

// The GPU type a site's configurations run on, for hlp-plan --gpu: psc-bridges2's gpu-type
// (v100-32 by default), `gpu-type` of a generic site if set; "" for local (CPU ranks) or unset.
std::string site_gpu_type(const std::string& site, const JobFile& job);

// Predicts the configurations whose device is cuda with `plan_binary` (files under work_dir),
// removes those predicted not to fit from `sweep` (its shapes regrouped) and says which.
// Throws UserError when hlp-plan fails, when it says a configuration cannot run at all (hlp-train
// would refuse it: e.g. --tp with --lora-dropout > 0), or when every configuration is left out.
PlanPrune prune_by_plan(Sweep& sweep, const JobFile& job, const std::string& gpu,
                        const std::string& plan_binary, const std::string& work_dir);

}  // namespace hlp::sweep
