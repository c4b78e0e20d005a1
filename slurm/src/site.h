#pragma once
// Site profiles: the #SBATCH lines that ask a site for N ranks, and the launcher line.
//   local        the one-machine Slurm of slurm/local-cluster.sh: CPU ranks (--ntasks, --overcommit)
//   psc-bridges2 PSC Bridges-2: GPU-shared below a full node, GPU for whole 8-GPU nodes,
//                --gpus=v100-32:N or h100-80:N
//   generic      any Slurm: --ntasks and --gpus-per-task
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
// "srun --mpi=pmi2" or "mpiexec -n \"$SLURM_NTASKS\"" (job setting `launcher`).
std::string launcher_line(Site site, const JobFile& job);

}  // namespace hlp::sweep
