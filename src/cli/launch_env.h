#pragma once
// The rank this process will have, read from the launcher's environment before MPI starts, so
// that configuration errors are printed once (by rank 0) and not once per rank.
#include <cstdlib>
#include <string>
#include <vector>

namespace hlp::cli {

inline int launcher_rank() {
  for (const char* var : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// Launch guard (issue 39). How many processes the launcher says this job step has, per variable
// that says it: SLURM_NTASKS (sbatch / srun: the job's tasks), PMI_SIZE (MPICH's hydra, srun's
// PMI plugins), PMIX_SIZE (PMIx launchers), OMPI_COMM_WORLD_SIZE (Open MPI's mpirun).
struct LaunchSize {
  std::string variable;
  int tasks = 0;
};
inline std::vector<LaunchSize> launcher_sizes() {
  std::vector<LaunchSize> out;
  for (const char* var : {"SLURM_NTASKS", "PMI_SIZE", "PMIX_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(var);
    if (v && *v && std::atoi(v) > 0) out.push_back({var, std::atoi(v)});
  }
  return out;
}

// "" when every launcher variable agrees with the MPI world's size (or HLP_IGNORE_LAUNCH_SIZE=1);
// otherwise the one error line's text. A launcher and an MPI library that do not speak the same
// protocol (srun --mpi=pmi2 around an MPI built for PMIx) start N processes that each see a
// world of 1 and would all write the same result file as rank 0.
inline std::string launch_mismatch(int world_size) {
  if (const char* ignore = std::getenv("HLP_IGNORE_LAUNCH_SIZE"); ignore && std::string(ignore) == "1")
    return "";
  for (const auto& l : launcher_sizes()) {
    if (l.tasks == world_size) continue;
    return "the launcher says " + std::to_string(l.tasks) + " process(es) (" + l.variable + "=" +
           std::to_string(l.tasks) + ") but MPI started a world of " + std::to_string(world_size) +
           (world_size == 1 ? ": each process runs alone as rank 0, so the launcher and the MPI "
                              "library do not match (e.g. srun --mpi=pmi2 with an MPI built for "
                              "PMIx: use the launcher of that MPI, slurm/README.md)"
                            : ": mpiexec -n and the job's --ntasks differ") +
           "; nothing was written (HLP_IGNORE_LAUNCH_SIZE=1 if this is intended)";
  }
  return "";
}

}  // namespace hlp::cli
