#pragma once
// The ranks of `comm` that run on this host, as one communicator per host, ordered by their
// rank in `comm` (free it with MPI_Comm_free). COLLECTIVE over `comm`.
// Grouped by host name (MPI_Get_processor_name), not by MPI_COMM_TYPE_SHARED: that one is a
// shared-memory domain, which the MPI standard lets be smaller than a node, and it is in
// Debian sid's MPICH 5.0.2 (ch4:ucx): two ranks on one host get a SHARED communicator of 1 each.
// HLP wants the node (its memory divided among the node's ranks, a GPU per node-local rank).
#include <mpi.h>

#include <cstring>
#include <vector>

namespace hlp::comm {

inline MPI_Comm split_by_host(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<char> names(size_t(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, comm);
  int colour = rank;  // the lowest rank on this host
  for (int r = 0; r < size; ++r)
    if (std::strncmp(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME], name, MPI_MAX_PROCESSOR_NAME) == 0) {
      colour = r;
      break;
    }
  MPI_Comm node;
  MPI_Comm_split(comm, colour, rank, &node);
  return node;
}

}  // namespace hlp::comm
