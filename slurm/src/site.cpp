#include "site.h"

#include <cstdio>

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

// psc-bridges2's --gpus type (job setting gpu-type).
std::string bridges2_gpu_type(const JobFile& job) {
  return job.setting("psc-bridges2", "gpu-type", "v100-32");
}

// Service units one GPU-hour costs on Bridges-2, by --gpus type: V100 nodes (v100-32, v100-16)
// 1, H100 nodes (h100-80) 2. Source: PSC's Bridges-2 User Guide,
// https://www.psc.edu/resources/bridges-2/user-guide/ , which the development machines cannot
// read; the numbers are its transcription in
// https://github.com/JakoError/claude-research-skills/blob/28ded79f69c6187d4abe3b6ca6818ae84896036a/skills/psc-bridges2/SKILL.md
// ("GPU V100 / L40S: 1 GPU-hour = 1 SU (8 SUs/node-hour)", "GPU H100: 1 GPU-hour = 2 SUs
// (16 SUs/node-hour)"). slurm/README.md ("Cost before submit") says more; a job file's
// su-per-gpu-hour overrides them.
std::optional<double> bridges2_su_per_gpu_hour(const std::string& gpu_type) {
  if (gpu_type == "v100-32" || gpu_type == "v100-16") return 1.0;
  if (gpu_type == "h100-80") return 2.0;
  return std::nullopt;
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
      const std::string gpu_type = bridges2_gpu_type(job);
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

std::string default_launcher(Site site) {
  // Bridges-2's MPI is Open MPI from its modules, started with its own mpirun inside the
  // allocation: PSC's Bridges-2 User Guide, https://www.psc.edu/resources/bridges-2/user-guide/
  // (sample MPI batch script). The development machines cannot read that page; what it says is
  // taken from its transcriptions: "module load gcc openmpi" + "mpirun ./my_mpi_app" in
  // https://github.com/JakoError/claude-research-skills/blob/7978142fa77ade99138a01e960f6e7d1474d5e97/skills/psc-bridges2/job-scripts.md
  // ("MPI (OpenMPI on RM)"), and mpi_cmd = "mpirun" for Bridges-2 in signac-flow
  // (https://github.com/glotzerlab/signac-flow/blob/e8726bbf1bcf7433a9bcb5f724824a0e8866f75b/flow/environments/xsede.py).
  // slurm/README.md ("PSC Bridges-2") says what was and was not confirmed.
  return site == Site::psc_bridges2 ? "mpirun" : "srun";
}

std::string launcher_line(Site site, const JobFile& job) {
  const std::string s = site_name(site);
  std::string launcher = job.setting(s, "launcher", default_launcher(site));
  if (launcher == "srun") {
    // The PMI plugin must be the one the MPI library speaks (a mismatch starts N worlds of 1,
    // which hlp-train's launch guard refuses): on the local Slurm that is this build's MPI
    // (MPICH: pmi2; Open MPI: pmix, Debian's has no PMI-2 client); elsewhere pmi2 unless set.
    std::string plugin = job.setting(s, "srun-mpi", site == Site::local ? HLP_SWEEP_LOCAL_SRUN_MPI : "pmi2");
    return "srun --mpi=" + plugin;
  }
  if (launcher == "mpirun") return "mpirun -np \"$SLURM_NTASKS\"";
  if (launcher == "mpiexec") {
    // On the local Slurm: this build's own launcher (cmake/HLPDependencies.cmake, hlp-mpiexec),
    // not whichever mpiexec Debian's alternatives point at. Elsewhere: the site's from PATH.
    if (site == Site::local) return std::string("'") + HLP_SWEEP_LOCAL_MPIEXEC + "' -n \"$SLURM_NTASKS\"";
    return "mpiexec -n \"$SLURM_NTASKS\"";
  }
  throw user_error(job.path, ": 'launcher = ", launcher, "' must be srun, mpirun or mpiexec");
}

int gpus_per_rank(Site site, const JobFile& job) {
  switch (site) {
    case Site::psc_bridges2: return 1;
    case Site::generic: return positive_setting(job, site_name(site), "gpus-per-task", 1);
    case Site::local: return 0;
  }
  return 0;
}

std::string ChargeRate::text() const {
  char text[32];
  std::snprintf(text, sizeof text, "%.10g", su_per_gpu_hour);
  return text;
}

std::optional<ChargeRate> charge_rate(Site site, const JobFile& job) {
  if (gpus_per_rank(site, job) == 0) return std::nullopt;  // CPU ranks: rank-hours, no SUs
  const std::string s = site_name(site);
  if (auto set = number_setting(job, s, "su-per-gpu-hour", "service units one GPU-hour costs"))
    return ChargeRate{*set, "job file su-per-gpu-hour"};
  if (site != Site::psc_bridges2) return std::nullopt;
  // every type array_header accepts has a rate; it rejects the others with their own message
  const std::string gpu_type = bridges2_gpu_type(job);
  if (auto rate = bridges2_su_per_gpu_hour(gpu_type))
    return ChargeRate{*rate, "PSC Bridges-2 User Guide's rate for " + gpu_type + " as transcribed, check it"};
  return std::nullopt;
}

}  // namespace hlp::sweep
