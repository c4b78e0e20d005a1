#include "train/thread_pools.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace hlp::train {
namespace {

// A function of a library already loaded into the process (LibTorch's dependencies), or null.
template <typename Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

// Bounds the BLAS pool and describes the library. Tries OpenBLAS, MKL, BLIS in that order.
void bound_blas(int threads, ThreadPools& out) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  using ConfigFn = char* (*)();
  if (auto set = find_symbol<SetFn>("openblas_set_num_threads")) {
    set(threads);
    auto get = find_symbol<GetFn>("openblas_get_num_threads");
    auto config = find_symbol<ConfigFn>("openblas_get_config");
    auto parallel = find_symbol<GetFn>("openblas_get_parallel");
    out.blas = std::string("OpenBLAS") + (config ? std::string(" ") + config() : "");
    if (parallel) {
      const int p = parallel();
      out.blas += p == 0 ? " (sequential)" : p == 1 ? " (pthreads)" : " (OpenMP)";
    }
    out.blas_threads = get ? get() : -1;
    return;
  }
  if (auto set = find_symbol<SetFn>("MKL_Set_Num_Threads")) {
    set(threads);
    auto get = find_symbol<GetFn>("MKL_Get_Max_Threads");
    out.blas = "MKL";
    out.blas_threads = get ? get() : -1;
    return;
  }
  using BliSetFn = void (*)(long);
  if (auto set = find_symbol<BliSetFn>("bli_thread_set_num_threads")) {
    set(long(threads));
    using BliGetFn = long (*)();
    auto get = find_symbol<BliGetFn>("bli_thread_get_num_threads");
    out.blas = "BLIS";
    out.blas_threads = get ? int(get()) : -1;
    return;
  }
  out.blas = "unknown";  // reference BLAS (single-threaded) or a BLAS without a threads API
  out.blas_threads = -1;
}

}  // namespace

ThreadPools bound_thread_pools(int threads) {
  ThreadPools out;
  out.requested = std::max(1, threads);
  at::set_num_threads(out.requested);  // intra-op; OpenMP too in an OpenMP build
  try {
    // int(): the count is an int in LibTorch 1.13 / 2.6, a size_t in 2.14
    if (int(at::get_num_interop_threads()) != out.requested)
      at::set_num_interop_threads(out.requested);
  } catch (const c10::Error&) {
    // already started (a second run in one process): keep what it has
  }
  out.intra_op = at::get_num_threads();
  out.inter_op = at::get_num_interop_threads();
  using OmpSetFn = void (*)(int);
  using OmpGetFn = int (*)();
  if (auto omp_set = find_symbol<OmpSetFn>("omp_set_num_threads")) omp_set(out.requested);
  if (auto omp_get = find_symbol<OmpGetFn>("omp_get_max_threads")) out.openmp = omp_get();
  bound_blas(out.requested, out);
  return out;
}

int node_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return node_cores();
  return std::max(1, CPU_COUNT(&set));
}

int default_threads(int local_ranks) {
  const int slurm = env_int("SLURM_CPUS_PER_TASK");
  if (slurm > 0) return slurm;
  const int usable = affinity_cores();
  if (usable < node_cores()) return usable;
  return std::max(1, usable / std::max(1, local_ranks));
}

int launcher_local_ranks() {
  for (const char* var : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    const int n = env_int(var);
    if (n > 0) return n;
  }
  return 1;
}

}  // namespace hlp::train
