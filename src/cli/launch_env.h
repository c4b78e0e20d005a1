#pragma once
// The rank this process will have, read from the launcher's environment before MPI starts, so
// that configuration errors are printed once (by rank 0) and not once per rank.
#include <cstdlib>
#include <string>

namespace hlp::cli {

inline int launcher_rank() {
  for (const char* var : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

}  // namespace hlp::cli
