// CPU peak FLOP/s measured in the same run, on the same threads (REFERENCE.md §3: "on a CPU, use
// a peak measured in the same run (a large sgemm on the same cores) and say so").
#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <sstream>

#include "common/clock.h"
#include "metrics/torch_info.h"

namespace hlp::metrics {

std::string libtorch_version() { return TORCH_VERSION; }

PeakFlops measure_cpu_peak_flops(double seconds, int64_t n) {
  if (n < 64) n = 64;
  at::Tensor a = at::rand({n, n}, at::kFloat);
  at::Tensor b = at::rand({n, n}, at::kFloat);
  at::Tensor c = at::empty({n, n}, at::kFloat);
  at::mm_out(c, a, b);  // warm-up: BLAS thread pool, page faults
  const double flop = 2.0 * static_cast<double>(n) * n * n;
  double best_s = 1e30;
  int runs = 0;
  const double deadline = hlp::now_s() + seconds;
  do {
    const double t0 = hlp::now_s();
    at::mm_out(c, a, b);
    best_s = std::min(best_s, hlp::now_s() - t0);
    ++runs;
  } while (hlp::now_s() < deadline || runs < 3);
  PeakFlops p;
  p.flops_per_s = flop / best_s;
  std::ostringstream os;
  os << "measured: best of " << runs << " at::mm float32 " << n << "x" << n << " on "
     << at::get_num_threads() << " intra-op thread(s) of this rank, at start of the run";
  p.source = os.str();
  return p;
}

}  // namespace hlp::metrics
