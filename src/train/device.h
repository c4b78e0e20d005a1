#pragma once
// Which device a rank computes on and which backend its collectives use: --device and --comm
// resolved, plus the facts the result file records about the device.
//
//   --device auto  cuda when this LibTorch has CUDA and a GPU is visible, else cpu
//   --device cuda  rank takes GPU local_rank % visible_devices; the local rank comes from MPI
//                  (comm::split_by_host, ordered by world rank) and is checked against
//                  SLURM_LOCALID when Slurm set it
//   --comm auto    nccl on cuda, mpi on cpu. nccl refuses two ranks on one GPU (checked here
//                  by GPU UUID, so per-rank CUDA_VISIBLE_DEVICES is handled); mpi takes CUDA
//                  tensors by staging them through pinned host memory (comm/staging.h).
//
// Only the CUDA runtime API is used (cudaGetDeviceProperties, cudaSetDevice), never c10/cuda,
// so this compiles against Debian's CPU-only LibTorch. Without HLP_HAVE_CUDA (no toolkit at
// build time) --device cuda is refused.
#include <mpi.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "train/config.h"

namespace hlp::train {

struct DeviceInfo {
  c10::Device device{c10::kCPU};
  DeviceKind kind = DeviceKind::cpu;  // cpu | cuda (never automatic)
  std::string name = "cpu";     // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  int local_rank = 0;           // from comm::split_by_host
  int local_ranks = 1;          // ranks on this node
  int visible_devices = 0;      // cudaGetDeviceCount on this rank (0 on cpu)
  int node_devices_used = 0;    // distinct GPUs the ranks of this node compute on (0 on cpu)
  bool gpu_shared = false;      // some node of the job has two ranks on one GPU (all ranks agree)
  std::string compute_capability;  // "9.0" ("" on cpu)
  std::string driver_version;      // CUDA driver API version, "12.4" ("" when unknown)
  std::string runtime_version;     // CUDA runtime HLP was built with, "13.0" ("" without CUDA)
  int64_t memory_bytes = 0;        // cudaDeviceProp::totalGlobalMem (0 on cpu)
  // "cpu" or "cuda:<name>" (the result file's `device` attribute).
  std::string label() const { return kind == DeviceKind::cuda ? "cuda:" + name : "cpu"; }
  bool cuda() const { return kind == DeviceKind::cuda; }
};

// "" when this process can compute on CUDA, else why not (one clause, for an error message).
std::string cuda_unavailable_reason();

// Per rank, before MPI starts: cpu or cuda for --device, or hlp::UserError when `requested`
// is cuda and cannot be honoured, or --comm asks for a backend this build or device lacks.
// Every rank of one machine answers alike, so the error is printed once and every rank exits 2.
DeviceKind check_device_request(DeviceKind requested_device, CommBackend requested_comm);

// Collective over `comm` (every rank of the job): resolves the device, picks the GPU, makes it
// the calling thread's current CUDA device, and gathers the node facts above.
DeviceInfo select_device(DeviceKind requested_device, MPI_Comm comm);

// nccl or mpi for --comm and the selected device. hlp::UserError (same on every rank) for
// nccl on cpu, nccl without NCCL in this build, and nccl with two ranks on one GPU.
CommBackend resolve_comm(CommBackend requested_comm, const DeviceInfo& device);

}  // namespace hlp::train
