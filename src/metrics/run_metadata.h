#pragma once
// Run metadata gathered over MPI for the result file (host names, versions, Slurm ids, time
// stamps), and the small collective helpers the writer uses to keep every rank in step.
#include <mpi.h>

#include <string>
#include <vector>

namespace hlp::metrics {

// Rank 0's string on every rank.
void bcast_string(std::string& s, MPI_Comm comm);
// Every rank's host name, in rank order, comma separated. Collective.
std::string gather_hosts(MPI_Comm comm, int world);
// Every rank's value, in rank order. Collective.
std::vector<double> gather_double(MPI_Comm comm, int world, double local);
// Collective: if any rank passes a non-empty problem, every rank throws hlp::UserError (the
// ranks with a problem their own message, the others a pointer to it), so none is left waiting.
void agree_or_throw(MPI_Comm comm, const std::string& local_problem);

std::string utc_now_iso8601();           // "2026-11-22T00:30:00Z"
std::string env_or_empty(const char* name);
std::string mpi_library_version();       // first line of MPI_Get_library_version

// Median of the non-NaN values (NaN if there are none).
double median_ignoring_nan(std::vector<double> values);

}  // namespace hlp::metrics
