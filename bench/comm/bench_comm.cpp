// hlp-bench-comm: HLP's MPI Communicator against raw MPI on the same buffers, in the same run.
//   mpiexec -n 2 hlp-bench-comm [--min-bytes 4096] [--max-bytes 67108864] [--factor 4]
//                               [--reps 5] [--iters N] [--ops all_reduce,all_gather,reduce_scatter]
// Columns and their meaning: bench/comm/README.md (nccl-tests conventions).
#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "common/clock.h"

namespace {

using hlp::comm::MpiCommunicator;

struct Options {
  int64_t min_bytes = 4096;
  int64_t max_bytes = 64 << 20;
  int factor = 4;
  // Many short alternating measurements rather than a few long ones: on a shared node the noise
  // comes in bursts, and fine interleaving lets HLP and raw MPI see the same bursts.
  int reps = 9;   // alternating raw / HLP / HLP-async measurements; the median of each is reported
  int iters = 0;  // calls per measurement; 0 = about 16 MiB moved, between 2 and 50 calls
  std::string ops = "all_reduce,all_gather,reduce_scatter";
};

// One collective: how to run it through HLP and through raw MPI on the same buffers, and its
// nccl-tests bus-bandwidth factor.
struct Collective {
  const char* name;
  double bus_factor;  // busbw = algbw * bus_factor(n)
  std::function<void()> hlp;        // sync form (inline on this thread when the queue is idle)
  std::function<void()> hlp_async;  // async form + wait (through the communication thread)
  std::function<void()> raw;
};

// Seconds per call: `iters` back-to-back calls between barriers, slowest rank.
double time_per_call_s(const std::function<void()>& op, int iters, MPI_Comm comm) {
  MPI_Barrier(comm);
  const double start_s = hlp::now_s();
  for (int i = 0; i < iters; ++i) op();
  double elapsed_s = hlp::now_s() - start_s;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed_s, 1, MPI_DOUBLE, MPI_MAX, comm);
  return elapsed_s / iters;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

bool wants(const Options& options, const char* op) {
  return ("," + options.ops + ",").find(std::string(",") + op + ",") != std::string::npos;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "hlp-bench-comm: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--min-bytes") o.min_bytes = std::stoll(value());
    else if (arg == "--max-bytes") o.max_bytes = std::stoll(value());
    else if (arg == "--factor") o.factor = std::stoi(value());
    else if (arg == "--reps") o.reps = std::stoi(value());
    else if (arg == "--ops") o.ops = value();
    else if (arg == "--iters") o.iters = std::stoi(value());
    else {
      std::fprintf(stderr,
                   "usage: hlp-bench-comm [--min-bytes B] [--max-bytes B] [--factor F] "
                   "[--reps R] [--iters N] [--ops all_reduce,all_gather,reduce_scatter]\n");
      std::exit(arg == "--help" ? 0 : 2);
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.factor < 2 || o.reps < 1) {
    std::fprintf(stderr, "hlp-bench-comm: need 4 <= min-bytes <= max-bytes, factor >= 2, reps >= 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = hlp::comm::init_mpi_world(argc, argv);
  const Options options = parse(argc, argv);
  const int n = world->size();
  const bool root = world->rank() == 0;
  // Raw MPI gets its own duplicate so it never shares a communicator with the HLP thread.
  MPI_Comm raw_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);

  if (root) {
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(mpi_version, &length);
    std::string first_line(mpi_version, std::strcspn(mpi_version, "\n"));
    std::printf("# hlp-bench-comm: %d ranks, float32, HLP MPI backend vs raw MPI (%s)\n", n,
                first_line.c_str());
    std::printf("# time = median over %d alternating repetitions of the per-call time of the "
                "slowest rank; GB/s = 1e9 B/s\n",
                options.reps);
    std::printf("%-15s %10s %10s | %10s %8s %8s | %10s %8s %8s | %7s | %10s %7s\n", "op",
                "size_B", "count", "hlp_us", "algbw", "busbw", "mpi_us", "algbw", "busbw",
                "hlp/mpi", "async_us", "async/mpi");
  }

  for (int64_t size_bytes = options.min_bytes; size_bytes <= options.max_bytes;
       size_bytes *= options.factor) {
    // size = nccl-tests' size: the all-reduce buffer, the all-gather output, the
    // reduce-scatter input; count = float32 elements of that buffer (a multiple of n).
    const int64_t count = std::max<int64_t>(n, (size_bytes / 4) / n * n);
    const int64_t shard = count / n;
    at::Tensor full = at::zeros({count}, at::kFloat);
    at::Tensor part = at::zeros({shard}, at::kFloat);
    float* full_ptr = full.data_ptr<float>();
    float* part_ptr = part.data_ptr<float>();

    std::vector<Collective> collectives;
    if (wants(options, "all_reduce"))
      collectives.push_back(
          {"all_reduce", 2.0 * (n - 1) / n, [&] { world->all_reduce(full); },
           [&] { world->all_reduce_async(full, hlp::comm::ReduceOp::Sum)->wait(); },
           [&] {
             MPI_Allreduce(MPI_IN_PLACE, full_ptr, int(count), MPI_FLOAT, MPI_SUM, raw_comm);
           }});
    if (wants(options, "all_gather"))
      collectives.push_back(
          {"all_gather", double(n - 1) / n, [&] { world->all_gather(part, full); },
           [&] { world->all_gather_async(part, full)->wait(); },
           [&] {
             MPI_Allgather(part_ptr, int(shard), MPI_FLOAT, full_ptr, int(shard), MPI_FLOAT,
                           raw_comm);
           }});
    if (wants(options, "reduce_scatter"))
      collectives.push_back(
          {"reduce_scatter", double(n - 1) / n, [&] { world->reduce_scatter(full, part); },
           [&] { world->reduce_scatter_async(full, part, hlp::comm::ReduceOp::Sum)->wait(); },
           [&] {
             MPI_Reduce_scatter_block(full_ptr, part_ptr, int(shard), MPI_FLOAT, MPI_SUM,
                                      raw_comm);
           }});

    const int64_t bytes = count * 4;
    // ~64 MiB moved per measurement, between 3 and 200 calls
    const int iters = options.iters > 0
                          ? options.iters
                          : int(std::clamp<int64_t>((int64_t(16) << 20) / bytes, 2, 50));
    for (const Collective& c : collectives) {
      c.hlp();  // warm-up: thread start, buffers, MPI connection setup
      c.hlp_async();
      c.raw();
      std::vector<double> hlp_s, async_s, raw_s;
      for (int rep = 0; rep < options.reps; ++rep) {
        raw_s.push_back(time_per_call_s(c.raw, iters, raw_comm));
        hlp_s.push_back(time_per_call_s(c.hlp, iters, raw_comm));
        async_s.push_back(time_per_call_s(c.hlp_async, iters, raw_comm));
      }
      const double hlp_time_s = median(hlp_s);
      const double async_time_s = median(async_s);
      const double raw_time_s = median(raw_s);
      const double hlp_algbw = bytes / hlp_time_s / 1e9;
      const double raw_algbw = bytes / raw_time_s / 1e9;
      if (root)
        std::printf(
            "%-15s %10lld %10lld | %10.1f %8.3f %8.3f | %10.1f %8.3f %8.3f | %7.3f | %10.1f %7.3f\n",
            c.name, (long long)bytes, (long long)count, hlp_time_s * 1e6, hlp_algbw,
            hlp_algbw * c.bus_factor, raw_time_s * 1e6, raw_algbw, raw_algbw * c.bus_factor,
            raw_time_s / hlp_time_s, async_time_s * 1e6, raw_time_s / async_time_s);
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&raw_comm);
  world.reset();
  hlp::comm::finalize();
  return 0;
}
