#pragma once
// The world communicator of an MPI Catch2 test executable (set up by mpi_test_main.cpp).
#include <memory>

#include "comm/mpi_communicator.h"

hlp::comm::MpiCommunicator& test_world();
std::shared_ptr<hlp::comm::MpiCommunicator> test_world_ptr();
