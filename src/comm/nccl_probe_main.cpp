// hlp-nccl-probe: proves the NCCL backend compiles and links, and reports what the machine has.
// Without a CUDA device (CI, the development machines) it says so and exits 0. With devices
// and a CUDA-enabled LibTorch it runs one all_reduce and one all_to_all (uneven counts, one
// empty, as expert parallelism's dispatch sends) over NCCL on every rank (under mpiexec).
#include <ATen/ATen.h>

#include <cstdio>
#include <string>
#include <vector>

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
  const bool reduce_ok = x.sum().item<double>() == 1024.0 * nccl->size();
  std::printf("rank %d: NCCL all_reduce over %d ranks %s\n", world->rank(), nccl->size(),
              reduce_ok ? "ok" : "WRONG");
  // all_to_all: rank r sends rank p count(r, p) = 1 + r + 2 p values r * 1000 + p, except none
  // to the rank after it (so an empty piece exists at every world size but 1, where the
  // second call sends nothing at all)
  const int n = nccl->size(), me = world->rank();
  bool a2a_ok = true;
  for (bool empty : {false, true}) {
    auto count = [&](int r, int p) -> int64_t {
      if (empty) return 0;
      return (n > 1 && p == (r + 1) % n) ? 0 : 1 + r + 2 * p;
    };
    std::vector<int64_t> send(static_cast<size_t>(n), 0), recv(static_cast<size_t>(n), 0);
    int64_t ns = 0, nr = 0;
    for (int p = 0; p < n; ++p) {
      send[size_t(p)] = count(me, p);
      recv[size_t(p)] = count(p, me);
      ns += send[size_t(p)];
      nr += recv[size_t(p)];
    }
    const auto opts = at::TensorOptions().device(at::kCUDA, me % devices).dtype(at::kFloat);
    std::vector<at::Tensor> pieces;
    for (int p = 0; p < n; ++p) pieces.push_back(at::full({send[size_t(p)]}, me * 1000.0 + p, opts));
    at::Tensor in = ns ? at::cat(pieces) : at::empty({0}, opts);
    at::Tensor out = at::full({nr}, -1.0, opts);
    nccl->all_to_all(in, out, send, recv);
    std::vector<at::Tensor> want;
    for (int r = 0; r < n; ++r) want.push_back(at::full({recv[size_t(r)]}, r * 1000.0 + me, opts));
    const bool ok = nr == 0 ? out.numel() == 0 : at::equal(out, at::cat(want));
    std::printf("rank %d: NCCL all_to_all over %d ranks, %lld values sent, %lld received: %s\n",
                me, n, static_cast<long long>(ns), static_cast<long long>(nr), ok ? "ok" : "WRONG");
    a2a_ok = a2a_ok && ok;
  }
  const bool ok = reduce_ok && a2a_ok;
  nccl.reset();
  world.reset();
  finalize();
  return ok ? 0 : 1;
}
