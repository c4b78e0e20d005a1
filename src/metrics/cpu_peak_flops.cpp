// CPU peak FLOP/s measured in the same run, on the same threads: a CPU has no datasheet peak
// that means anything for LibTorch, so MFU divides by a large sgemm timed on the same cores, and
// the source says so (docs/model-math.md, "FLOPs and MFU").
#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include "common/clock.h"
#include "metrics/torch_info.h"

namespace hlp::metrics {

std::string libtorch_version() { return TORCH_VERSION; }

namespace {

// Best wall time of `run` over repeated calls for `seconds` (at least 3 calls), and the calls.
template <typename F>
std::pair<double, int> best_time_s(F&& run, double seconds) {
  double best_s = 1e30;
  int runs = 0;
  const double deadline = hlp::now_s() + seconds;
  do {
    const double t0 = hlp::now_s();
    run();
    best_s = std::min(best_s, hlp::now_s() - t0);
    ++runs;
  } while (hlp::now_s() < deadline || runs < 3);
  return {best_s, runs};
}

}  // namespace

PeakFlops measure_cpu_peak_flops(double seconds, int64_t n) {
  if (n < 64) n = 64;
  at::Tensor a = at::rand({n, n}, at::kFloat);
  at::Tensor b = at::rand({n, n}, at::kFloat);
  at::Tensor c = at::empty({n, n}, at::kFloat);
  at::mm_out(c, a, b);  // warm-up: BLAS thread pool, page faults
  const double flop = 2.0 * static_cast<double>(n) * n * n;
  const auto [best_s, runs] = best_time_s([&] { at::mm_out(c, a, b); }, seconds);
  PeakFlops p;
  p.flops_per_s = flop / best_s;
  std::ostringstream os;
  os << "measured: best of " << runs << " at::mm float32 " << n << "x" << n << " on "
     << at::get_num_threads() << " intra-op thread(s) of this rank, at start of the run";
  p.source = os.str();
  return p;
}

PeakFlops measure_cuda_peak_flops(int device_index, bool bf16, double seconds, int64_t n) {
  const auto options = at::TensorOptions()
                           .dtype(bf16 ? at::kBFloat16 : at::kFloat)
                           .device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index)));
  at::Tensor a = at::rand({n, n}, options);
  at::Tensor b = at::rand({n, n}, options);
  at::Tensor c = at::empty({n, n}, options);
  constexpr int kBatch = 8;
  auto run_batch = [&] {
    for (int i = 0; i < kBatch; ++i) at::mm_out(c, a, b);
    c[0][0].item<float>();  // waits for the batch on the device
  };
  run_batch();  // warm-up: cuBLAS handle, kernel selection
  const double flop = 2.0 * static_cast<double>(n) * n * n * kBatch;
  const auto [best_s, runs] = best_time_s(run_batch, seconds);
  PeakFlops p;
  p.flops_per_s = flop / best_s;
  std::ostringstream os;
  os << "measured: best of " << runs << " batches of " << kBatch << " at::mm "
     << (bf16 ? "bfloat16 " : "float32 ") << n << "x" << n << " on cuda:" << device_index
     << " at start of the run (GPU not in the datasheet table)";
  p.source = os.str();
  return p;
}

}  // namespace hlp::metrics
