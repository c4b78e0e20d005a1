// Micro-benchmark of the metrics hot paths (no assertions: it prints numbers).
//   span (tracing on / off), add_event, on_comm_op, and a small at::empty with and without the
//   counting CPU allocator.
// usage: hlp-bench-metrics [iterations]
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>

#include "common/clock.h"
#include "metrics/cpu_allocator_counter.h"
#include "metrics/recorder.h"

using namespace hlp::metrics;

namespace {
template <typename F>
double ns_per_call(int64_t iterations, F&& f) {
  f();  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = hlp::now_s();
    for (int64_t i = 0; i < iterations; ++i) f();
    best = std::min(best, (hlp::now_s() - t0) / static_cast<double>(iterations) * 1e9);
  }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 200000;
  Recorder rec;
  int64_t step = 0;

  rec.set_tracing(true);
  int64_t calls = 0;  // drain every 64k events, as a writer flush would (bounded memory)
  const double span_on = ns_per_call(n, [&] {
    auto s = rec.span("forward", Lane::Compute, step, 0);
    if ((++calls & 0xffff) == 0) rec.take_events();
  });
  rec.take_events();
  rec.set_tracing(false);
  const double span_off = ns_per_call(n, [&] { auto s = rec.span("forward", Lane::Compute, step, 0); });
  rec.set_tracing(true);
  const double comm_on = ns_per_call(n, [&] {
    const double t = hlp::now_s();
    rec.on_comm_op({hlp::comm::OpKind::AllReduce, 4096, t, t, 2, -1, true});
    if ((++calls & 0xffff) == 0) rec.take_events();
  });
  rec.take_events();
  const double now_cost = ns_per_call(n, [&] { volatile double t = hlp::now_s(); (void)t; });

  const int64_t an = n / 10;
  const double alloc_plain = ns_per_call(an, [] { at::Tensor t = at::empty({256}, at::kFloat); });
  CpuAllocatorCounter::install();
  const double alloc_counted = ns_per_call(an, [] { at::Tensor t = at::empty({256}, at::kFloat); });

  std::printf("hlp-bench-metrics (%lld iterations, best of 3)\n", static_cast<long long>(n));
  std::printf("  hlp::now_s()                       %8.1f ns\n", now_cost);
  std::printf("  span, tracing on  (2 clock reads + event store)  %8.1f ns\n", span_on);
  std::printf("  span, tracing off (2 clock reads)                %8.1f ns\n", span_off);
  std::printf("  on_comm_op, tracing on                           %8.1f ns\n", comm_on);
  std::printf("  at::empty(256 floats), default allocator         %8.1f ns\n", alloc_plain);
  std::printf("  at::empty(256 floats), counting allocator        %8.1f ns\n", alloc_counted);
  std::printf("  => tracing adds %.1f ns per span; counting adds %.1f ns per allocation\n",
              span_on - span_off, alloc_counted - alloc_plain);
  return 0;
}
