// Catch2 main for tests run under mpiexec: every rank runs every test case in the same order,
// so collectives inside test cases match up. The comm timeout is short (60 s) so that a test
// that deadlocks aborts the job well within ctest's timeout instead of hanging.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.h"

#include "comm/mpi_communicator.h"
#include "mpi_test_world.h"

namespace {
std::shared_ptr<hlp::comm::MpiCommunicator> g_world;
}

hlp::comm::MpiCommunicator& test_world() { return *g_world; }
std::shared_ptr<hlp::comm::MpiCommunicator> test_world_ptr() { return g_world; }

int main(int argc, char** argv) {
  g_world = hlp::comm::init_mpi_world(argc, argv, hlp::comm::CommOptions{60.0});
  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  if (rc != 0) return rc;
  const int failed = session.run();
  g_world.reset();
  hlp::comm::finalize();
  return failed ? 1 : 0;
}
