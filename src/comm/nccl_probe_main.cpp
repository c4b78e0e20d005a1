// hlp-nccl-probe: proves the NCCL backend compiles and links, and reports what the machine has.
// Without a CUDA device (CI, the development machines) it says so and exits 0. With devices
// and a CUDA-enabled LibTorch it runs one all_reduce over NCCL on every rank (under mpiexec).
#include <ATen/ATen.h>

#include <cstdio>
#include <string>

#include "comm/nccl_communicator.h"

int main(int argc, char** argv) {
  using namespace hlp::comm;
  std::string error;
  const int devices = cuda_device_count(&error);
  std::printf("hlp-nccl-probe: NCCL %s, CUDA runtime %s\n", nccl_version_string().c_str(),
              cuda_runtime_version_string().c_str());
  if (devices == 0) {
    std::printf("no CUDA device (cudaGetDeviceCount: %s); the NCCL backend is built but has "
                "nothing to run on\n",
                error.empty() ? "0 devices" : error.c_str());
    return 0;
  }
  if (!at::hasCUDA()) {
    std::printf("%d CUDA device(s), but this LibTorch is CPU-only: cannot make CUDA tensors\n",
                devices);
    return 0;
  }
  auto world = init_mpi_world(argc, argv);
  auto nccl = NcclCommunicator::create(*world, world->rank() % devices, world->options());
  at::Tensor x = at::ones({1024}, at::TensorOptions().device(at::kCUDA, world->rank() % devices));
  nccl->all_reduce(x);
  const bool ok = x.sum().item<double>() == 1024.0 * nccl->size();
  std::printf("rank %d: NCCL all_reduce over %d ranks %s\n", world->rank(), nccl->size(),
              ok ? "ok" : "WRONG");
  nccl.reset();
  world.reset();
  finalize();
  return ok ? 0 : 1;
}
