// --device / --comm resolution (train/device.h) on a machine without a usable GPU, plus the
// decisions that only depend on the DeviceInfo (so the GPU cases are pinned here too).
#include "catch_compat.h"

#include <functional>
#include <string>

#include "common/error.h"
#include "train/device.h"

using hlp::train::DeviceInfo;

namespace {
DeviceInfo cuda_device(bool shared) {
  DeviceInfo d;
  d.kind = "cuda";
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
  CHECK(hlp::train::check_device_request("auto", "auto") == "cpu");
  CHECK(hlp::train::check_device_request("cpu", "mpi") == "cpu");
  const std::string e = error_of([] { hlp::train::check_device_request("cuda", "auto"); });
  CHECK(e.find("--device cuda") != std::string::npos);
  CHECK(e.find(why) != std::string::npos);
  CHECK(e.find("--device cpu") != std::string::npos);
  CHECK(error_of([] { hlp::train::check_device_request("auto", "nccl"); }).find("nccl") !=
        std::string::npos);
}

TEST_CASE("device: --comm auto is mpi on cpu, nccl on one GPU per rank, mpi when ranks share",
          "[device]") {
  CHECK(hlp::train::resolve_comm("auto", DeviceInfo{}) == "mpi");
  CHECK(hlp::train::resolve_comm("mpi", DeviceInfo{}) == "mpi");
  CHECK(hlp::train::resolve_comm("mpi", cuda_device(false)) == "mpi");
  CHECK(error_of([] { hlp::train::resolve_comm("nccl", DeviceInfo{}); }).find("--comm nccl") !=
        std::string::npos);
#if defined(HLP_HAVE_CUDA)
  CHECK(hlp::train::resolve_comm("auto", cuda_device(false)) == "nccl");
  CHECK(hlp::train::resolve_comm("nccl", cuda_device(false)) == "nccl");
  CHECK(hlp::train::resolve_comm("auto", cuda_device(true)) == "mpi");
  const std::string e = error_of([] { hlp::train::resolve_comm("nccl", cuda_device(true)); });
  CHECK(e.find("same GPU") != std::string::npos);
  CHECK(e.find("NCCL refuses two ranks on one GPU") != std::string::npos);
  CHECK(e.find("--comm mpi") != std::string::npos);
#endif
}

TEST_CASE("device: the result file's device label", "[device]") {
  CHECK(DeviceInfo{}.label() == "cpu");
  CHECK(cuda_device(false).label() == "cuda:NVIDIA H100 80GB HBM3");
}
