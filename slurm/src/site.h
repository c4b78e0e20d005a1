#pragma once
// Site profiles: the #SBATCH lines that ask a site for N ranks, and the launcher line.
//   local        the one-machine Slurm of slurm/local-cluster.sh: CPU ranks (--ntasks, --overcommit)
//   psc-bridges2 PSC Bridges-2: GPU-shared below a full node, GPU for whole 8-GPU nodes,
//                --gpus=v100-32:N or h100-80:N
//   generic      any Slurm: --ntasks and --gpus-per-task
#include <optional>
#include <string>
#include <vector>

#include "job_file.h"

namespace hlp::sweep {

enum class Site { local, psc_bridges2, generic };

Site parse_site(const std::string& name);    // throws UserError listing the sites
std::string site_name(Site site);

// #SBATCH lines (resources, partition, account) of the job array whose tasks use `ranks` ranks.
std::vector<std::string> array_header(Site site, const JobFile& job, int ranks);
// #SBATCH lines of the single-task analysis job.
std::vector<std::string> analysis_header(Site site, const JobFile& job);
// The site's launcher when the job file names none: psc-bridges2 mpirun (Open MPI's, as PSC
// documents for Bridges-2), local and generic srun.
std::string default_launcher(Site site);
// The line that starts the ranks (job setting `launcher`, default default_launcher(site)):
//   srun     "srun --mpi=PLUGIN", PLUGIN the job's `srun-mpi`, else on the local site this build's
//            MPI's (pmi2 for MPICH, pmix for Open MPI), elsewhere pmi2
//   mpirun   "mpirun -np \"$SLURM_NTASKS\""
//   mpiexec  "mpiexec -n \"$SLURM_NTASKS\"" (local: this build's hlp-mpiexec, by absolute path)
std::string launcher_line(Site site, const JobFile& job);

// GPUs each rank of an array task holds: psc-bridges2 1 (--gpus=TYPE:ranks), generic its
// gpus-per-task (default 1), local 0 (CPU ranks).
int gpus_per_rank(Site site, const JobFile& job);

// What a GPU-hour costs in service units, and where that number comes from.
struct ChargeRate {
  double su_per_gpu_hour = 0;
  std::string source;  // "job file su-per-gpu-hour" or the site's published rate for its GPU type
  std::string text() const;  // the rate as a command-line value: "2", "0.75"
};
// The job file's `su-per-gpu-hour` when set (any GPU site), else the site's own rate for its GPU
// type (psc-bridges2: v100-32, v100-16, h100-80); nullopt where there is none, and always for
// CPU ranks (local, generic with gpus-per-task = 0). Throws UserError for a value that is not a
// number >= 0.
std::optional<ChargeRate> charge_rate(Site site, const JobFile& job);

}  // namespace hlp::sweep
