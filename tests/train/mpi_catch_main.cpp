// Catch2 main for MPI test executables: every rank runs every test case (they are collective).
#define CATCH_CONFIG_RUNNER
#include "catch_compat.h"

#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  hlp::comm::init_mpi_world(argc, argv, hlp::comm::CommOptions{120.0});
  const int failed = Catch::Session().run(argc, argv);
  int any_failed = failed, global = 0;
  MPI_Allreduce(&any_failed, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  hlp::comm::finalize();
  return global > 0 ? 1 : 0;
}
