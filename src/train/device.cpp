#include "train/device.h"

#include <ATen/Context.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "comm/node_comm.h"
#include "common/error.h"

#if defined(HLP_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace hlp::train {
namespace {

#if defined(HLP_HAVE_CUDA)
std::string cuda_version_text(int version) {  // 12040 -> "12.4"
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

int visible_cuda_devices(std::string* error) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (error) *error = cudaGetErrorString(rc);
    return 0;
  }
  return count;
}
#endif

}  // namespace

std::string cuda_unavailable_reason() {
#if !defined(HLP_HAVE_CUDA)
  return "this HLP build has no CUDA path (configure with the CUDA toolkit and NCCL, "
         "-DHLP_WITH_CUDA=ON)";
#else
  std::string error;
  const int devices = visible_cuda_devices(&error);
  if (devices == 0)
    return "no CUDA GPU is visible (cudaGetDeviceCount: " +
           (error.empty() ? std::string("0 devices") : error) + ")";
  // A CPU-only LibTorch (Debian's) cannot make CUDA tensors even when a GPU is there.
  if (!at::hasCUDA())
    return "this LibTorch was built without CUDA (rebuild HLP against a CUDA LibTorch with "
           "-DTorch_DIR=...)";
  return "";
#endif
}

DeviceKind check_device_request(DeviceKind requested_device, CommBackend requested_comm) {
  DeviceKind kind = requested_device;
  if (requested_device == DeviceKind::cuda) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty())
      throw user_error("--device cuda: ", why, "; use --device cpu or auto");
  } else if (requested_device == DeviceKind::automatic) {
    kind = cuda_unavailable_reason().empty() ? DeviceKind::cuda : DeviceKind::cpu;
  }
  if (requested_comm == CommBackend::nccl) {
#if !defined(HLP_HAVE_CUDA)
    throw user_error("--comm nccl: this HLP build has no NCCL backend (configure with the CUDA "
                     "toolkit and NCCL); use --comm mpi or auto");
#endif
    if (kind != DeviceKind::cuda)
      throw user_error("--comm nccl moves CUDA tensors, but this run computes on the CPU (",
                       cuda_unavailable_reason(), "); use --comm mpi or auto");
  }
  return kind;
}

DeviceInfo select_device(DeviceKind requested_device, MPI_Comm comm) {
  DeviceInfo info;
  MPI_Comm node = comm::split_by_host(comm);
  MPI_Comm_rank(node, &info.local_rank);
  MPI_Comm_size(node, &info.local_ranks);
  if (const char* slurm_local = std::getenv("SLURM_LOCALID")) {
    // Both number the ranks of a node from 0; they differ only if the launcher and Slurm
    // disagree about placement (e.g. mpiexec inside an allocation with its own mapping).
    if (std::atoi(slurm_local) != info.local_rank)
      std::fprintf(stderr, "[hlp-train] warning: SLURM_LOCALID=%s but MPI's node-local rank is "
                   "%d; HLP picks the GPU from MPI's (local_rank %% visible GPUs)\n",
                   slurm_local, info.local_rank);
  }
  // Every rank resolves --device alike (check_device_request ran before MPI on every rank);
  // agree anyway, so that one odd node cannot leave the job half on CPU.
  int local_cuda =
      check_device_request(requested_device, CommBackend::automatic) == DeviceKind::cuda ? 1 : 0;
  int all_cuda = 0;
  MPI_Allreduce(&local_cuda, &all_cuda, 1, MPI_INT, MPI_MIN, comm);
  int any_cuda = 0;
  MPI_Allreduce(&local_cuda, &any_cuda, 1, MPI_INT, MPI_MAX, comm);
  if (any_cuda && !all_cuda) {
    MPI_Comm_free(&node);
    throw user_error("--device ", to_string(requested_device), ": some ranks can use CUDA and "
                     "others "
                     "cannot (", local_cuda ? "another rank's node" : cuda_unavailable_reason(),
                     "); use --device cpu or run on GPU nodes only");
  }
  if (!all_cuda) {
    MPI_Comm_free(&node);
    return info;
  }
#if defined(HLP_HAVE_CUDA)
  info.kind = DeviceKind::cuda;
  info.visible_devices = visible_cuda_devices(nullptr);
  const int index = info.local_rank % info.visible_devices;
  info.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  // The runtime's current device: NCCL, cudaStreamCreate and LibTorch's default device follow it.
  cudaSetDevice(index);
  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof(prop));
  cudaGetDeviceProperties(&prop, index);
  info.name = prop.name;
  info.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    info.driver_version = cuda_version_text(driver);
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.runtime_version = cuda_version_text(runtime);
  // GPUs are told apart by UUID, not index: with per-rank CUDA_VISIBLE_DEVICES every rank's
  // index is 0 but the GPUs differ.
  std::vector<char> uuids(size_t(16) * size_t(info.local_ranks));
  MPI_Allgather(prop.uuid.bytes, 16, MPI_CHAR, uuids.data(), 16, MPI_CHAR, node);
  std::set<std::string> distinct;
  for (int r = 0; r < info.local_ranks; ++r)
    distinct.insert(std::string(uuids.data() + 16 * r, 16));
  info.node_devices_used = static_cast<int>(distinct.size());
  int shared = info.node_devices_used < info.local_ranks ? 1 : 0, any_shared = 0;
  MPI_Allreduce(&shared, &any_shared, 1, MPI_INT, MPI_MAX, comm);
  info.gpu_shared = any_shared != 0;
#endif
  MPI_Comm_free(&node);
  return info;
}

CommBackend resolve_comm(CommBackend requested_comm, const DeviceInfo& device) {
  const bool cuda = device.cuda();
  if (requested_comm == CommBackend::mpi) return CommBackend::mpi;
  if (requested_comm == CommBackend::automatic && !cuda) return CommBackend::mpi;
#if !defined(HLP_HAVE_CUDA)
  throw user_error("--comm nccl: this HLP build has no NCCL backend; use --comm mpi or auto");
#else
  if (!cuda)
    throw user_error("--comm nccl needs --device cuda (this run computes on the CPU); use "
                     "--comm mpi or auto");
  if (device.gpu_shared) {
    // NCCL cannot; the MPI backend stages via host
    if (requested_comm == CommBackend::automatic) return CommBackend::mpi;
    throw user_error("--comm nccl: two or more ranks of one node compute on the same GPU (",
                     device.local_ranks, " ranks on this node, ", device.node_devices_used,
                     " GPU(s) among them), and NCCL refuses two ranks on one GPU; launch at most "
                     "one rank per GPU, or use --comm mpi (CUDA tensors staged through host "
                     "memory)");
  }
  return CommBackend::nccl;
#endif
}

}  // namespace hlp::train
