#include "site.h"

#include "common/error.h"

namespace hlp::sweep {
namespace {

int positive_setting(const JobFile& job, const std::string& site, const std::string& key, int fallback) {
  std::string text = job.setting(site, key, std::to_string(fallback));
  try {
    size_t used = 0;
    int v = std::stoi(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw user_error(job.path, ": '", key, " = ", text, "' must be a non-negative integer");
}

bool yes(const JobFile& job, const std::string& site, const std::string& key, bool fallback) {
  std::string v = job.setting(site, key, fallback ? "yes" : "no");
  if (v == "yes" || v == "true" || v == "1") return true;
  if (v == "no" || v == "false" || v == "0") return false;
  throw user_error(job.path, ": '", key, " = ", v, "' must be yes or no");
}

// Lines every site shares: account, cpus-per-task, mem.
void common_lines(const JobFile& job, const std::string& site, std::vector<std::string>& lines) {
  std::string account = job.setting(site, "account");
  if (!account.empty()) lines.push_back("#SBATCH --account=" + account);
  std::string cpus = job.setting(site, "cpus-per-task");
  if (!cpus.empty()) lines.push_back("#SBATCH --cpus-per-task=" + cpus);
  std::string mem = job.setting(site, "mem");
  if (!mem.empty()) lines.push_back("#SBATCH --mem=" + mem);
}

}  // namespace

Site parse_site(const std::string& name) {
  if (name == "local") return Site::local;
  if (name == "psc-bridges2") return Site::psc_bridges2;
  if (name == "generic") return Site::generic;
  throw user_error("unknown site '", name, "'; sites are local, psc-bridges2, generic");
}

std::string site_name(Site site) {
  switch (site) {
    case Site::local: return "local";
    case Site::psc_bridges2: return "psc-bridges2";
    case Site::generic: return "generic";
  }
  return "";
}

std::vector<std::string> array_header(Site site, const JobFile& job, int ranks) {
  const std::string s = site_name(site);
  std::vector<std::string> lines;
  std::string partition = job.setting(s, "partition");
  switch (site) {
    case Site::psc_bridges2: {
      // Bridges-2 GPU nodes have 8 GPUs; GPU-shared hands out part of a node, GPU whole nodes.
      const int per_node = positive_setting(job, s, "gpus-per-node", 8);
      const std::string gpu_type = job.setting(s, "gpu-type", "v100-32");
      if (gpu_type != "v100-32" && gpu_type != "h100-80" && gpu_type != "v100-16")
        throw user_error(job.path, ": 'gpu-type = ", gpu_type, "' is not a Bridges-2 GPU type (v100-32, h100-80)");
      if (per_node < 1) throw user_error(job.path, ": gpus-per-node must be at least 1");
      const bool full_nodes = ranks >= per_node;
      if (full_nodes && ranks % per_node != 0)
        throw user_error(job.path, ": psc-bridges2: ", ranks, " ranks span more than one node but not whole ",
                         per_node, "-GPU nodes; use a multiple of ", per_node, " or exclude it");
      const int nodes = full_nodes ? ranks / per_node : 1;
      lines.push_back("#SBATCH --partition=" + (partition.empty() ? (full_nodes ? "GPU" : "GPU-shared") : partition));
      lines.push_back("#SBATCH --nodes=" + std::to_string(nodes));
      lines.push_back("#SBATCH --ntasks-per-node=" + std::to_string(full_nodes ? per_node : ranks));
      lines.push_back("#SBATCH --gpus=" + gpu_type + ":" + std::to_string(ranks));
      break;
    }
    case Site::generic: {
      if (!partition.empty()) lines.push_back("#SBATCH --partition=" + partition);
      lines.push_back("#SBATCH --ntasks=" + std::to_string(ranks));
      const int gpus = positive_setting(job, s, "gpus-per-task", 1);
      if (gpus > 0) lines.push_back("#SBATCH --gpus-per-task=" + std::to_string(gpus));
      if (yes(job, s, "exclusive", false)) lines.push_back("#SBATCH --exclusive");
      break;
    }
    case Site::local: {
      if (!partition.empty()) lines.push_back("#SBATCH --partition=" + partition);
      lines.push_back("#SBATCH --ntasks=" + std::to_string(ranks));
      // More ranks than the node advertises: let them share CPUs (--oversubscribe would pend forever).
      if (ranks > positive_setting(job, s, "node-cpus", 4)) lines.push_back("#SBATCH --overcommit");
      // One configuration at a time, so that measured step times do not share cores.
      if (yes(job, s, "exclusive", true)) lines.push_back("#SBATCH --exclusive");
      break;
    }
  }
  common_lines(job, s, lines);
  return lines;
}

std::vector<std::string> analysis_header(Site site, const JobFile& job) {
  const std::string s = site_name(site);
  std::vector<std::string> lines;
  std::string partition = job.setting(s, "analysis-partition");
  if (site == Site::psc_bridges2 && partition.empty()) partition = "RM-shared";  // CPU cores, no GPU
  if (!partition.empty()) lines.push_back("#SBATCH --partition=" + partition);
  lines.push_back("#SBATCH --ntasks=1");
  std::string account = job.setting(s, "account");
  if (!account.empty()) lines.push_back("#SBATCH --account=" + account);
  return lines;
}

std::string launcher_line(Site site, const JobFile& job) {
  std::string launcher = job.setting(site_name(site), "launcher", "srun");
  if (launcher == "srun") return "srun --mpi=pmi2";
  if (launcher == "mpiexec") return "mpiexec -n \"$SLURM_NTASKS\"";
  throw user_error(job.path, ": 'launcher = ", launcher, "' must be srun or mpiexec");
}

}  // namespace hlp::sweep
