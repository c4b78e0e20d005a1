#pragma once
// Every compute thread pool of a rank, bounded by one number (--threads).
//
// A rank's compute can run on four pools, and LibTorch's own setting reaches only some of them:
//   LibTorch intra-op (at::set_num_threads; with an OpenMP build also OpenMP's pool),
//   LibTorch inter-op (at::set_num_interop_threads; settable once, before first use),
//   the BLAS library LibTorch hands matrix products to. Debian's LibTorch calls libblas.so.3,
//   which is OpenBLAS when libopenblas0-pthread is installed: its own pthread pool is sized to
//   the machine whatever LibTorch says, so it is bounded here through its own API, found at run
//   time with dlsym (openblas_set_num_threads; mkl_set_num_threads / BLIS likewise).
// Unbounded, two ranks on two cores run four BLAS threads and identical runs differ up to 9x
// (measured, docs/measurement.md).
#include <string>

namespace hlp::train {

struct ThreadPools {
  int requested = 0;        // the --threads value applied
  int intra_op = 0;         // at::get_num_threads() after bounding
  int inter_op = 0;         // at::get_num_interop_threads(); -1 if it could not be set
  int openmp = -1;          // omp_get_max_threads(), -1 when no OpenMP runtime is loaded
  std::string blas;         // "OpenBLAS 0.3.21 DYNAMIC_ARCH ... (pthreads)", "MKL", "BLIS",
                            // or "unknown" (reference BLAS or none found)
  int blas_threads = -1;    // the BLAS pool size after bounding; -1 when it cannot be read
};

// Bounds every pool above to `threads` (>= 1) and reads back what each pool now uses.
// Idempotent; call before the first tensor operation of the run where possible (the inter-op
// pool can only be sized once per process).
ThreadPools bound_thread_pools(int threads);

// The default for --threads 0 (auto): the cores this rank may use.
//   1. SLURM_CPUS_PER_TASK when set (Slurm's allocation for this task),
//   2. else the affinity mask when the launcher bound the process to fewer cores than the node
//      has (mpiexec -bind-to core, srun --cpu-bind),
//   3. else the node's cores divided among the ranks sharing the node (`local_ranks`).
// Never less than 1.
int default_threads(int local_ranks);

// Cores of this node (std::thread::hardware_concurrency) and the size of this process's
// affinity mask.
int node_cores();
int affinity_cores();

// Ranks sharing this node according to the launcher's environment (MPI_LOCALNRANKS from
// Hydra, OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE), 1 when none is set. hlp-train
// uses comm::split_by_host instead; this is for callers without a communicator at hand.
int launcher_local_ranks();

}  // namespace hlp::train
