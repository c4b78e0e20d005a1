// --device / --comm resolution (train/device.h) on a machine without a usable GPU, plus the
// decisions that only depend on the DeviceInfo (so the GPU cases are pinned here too).
#include "catch_compat.h"

#include <functional>
#include <string>

#include "common/error.h"
#include "train/device.h"

using hlp::train::CommBackend;
using hlp::train::DeviceInfo;
using hlp::train::DeviceKind;

namespace {
DeviceInfo cuda_device(bool shared) {
  DeviceInfo d;
  d.kind = DeviceKind::cuda;
  d.name = "NVIDIA H100 80GB HBM3";
  d.local_ranks = 2;
  d.node_devices_used = shared ? 1 : 2;
  d.gpu_shared = shared;
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hlp::UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("device: without a usable GPU, auto is cpu and cuda is refused with the reason",
          "[device]") {
  const std::string why = hlp::train::cuda_unavailable_reason();
  REQUIRE_FALSE(why.empty());  // the development machines have no GPU and a CPU-only LibTorch
  CHECK(hlp::train::check_device_request(DeviceKind::automatic, CommBackend::automatic) ==
        DeviceKind::cpu);
  CHECK(hlp::train::check_device_request(DeviceKind::cpu, CommBackend::mpi) == DeviceKind::cpu);
  const std::string e = error_of(
      [] { hlp::train::check_device_request(DeviceKind::cuda, CommBackend::automatic); });
  CHECK(e.find("--device cuda") != std::string::npos);
  CHECK(e.find(why) != std::string::npos);
  CHECK(e.find("--device cpu") != std::string::npos);
  CHECK(error_of([] {
          hlp::train::check_device_request(DeviceKind::automatic, CommBackend::nccl);
        }).find("nccl") != std::string::npos);
}

TEST_CASE("device: --comm auto is mpi on cpu, nccl on one GPU per rank, mpi when ranks share",
          "[device]") {
  CHECK(hlp::train::resolve_comm(CommBackend::automatic, DeviceInfo{}) == CommBackend::mpi);
  CHECK(hlp::train::resolve_comm(CommBackend::mpi, DeviceInfo{}) == CommBackend::mpi);
  CHECK(hlp::train::resolve_comm(CommBackend::mpi, cuda_device(false)) == CommBackend::mpi);
  CHECK(error_of([] { hlp::train::resolve_comm(CommBackend::nccl, DeviceInfo{}); })
            .find("--comm nccl") !=
        std::string::npos);
#if defined(HLP_HAVE_CUDA)
  CHECK(hlp::train::resolve_comm(CommBackend::automatic, cuda_device(false)) == CommBackend::nccl);
  CHECK(hlp::train::resolve_comm(CommBackend::nccl, cuda_device(false)) == CommBackend::nccl);
  CHECK(hlp::train::resolve_comm(CommBackend::automatic, cuda_device(true)) == CommBackend::mpi);
  const std::string e =
      error_of([] { hlp::train::resolve_comm(CommBackend::nccl, cuda_device(true)); });
  CHECK(e.find("same GPU") != std::string::npos);
  CHECK(e.find("NCCL refuses two ranks on one GPU") != std::string::npos);
  CHECK(e.find("--comm mpi") != std::string::npos);
#endif
}

TEST_CASE("device: the result file's device label", "[device]") {
  CHECK(DeviceInfo{}.label() == "cpu");
  CHECK(cuda_device(false).label() == "cuda:NVIDIA H100 80GB HBM3");
}
