#include "train/run_context.h"

#include <stdexcept>

#include "comm/mpi_communicator.h"
#include "comm/node_comm.h"
#include "common/error.h"
#if defined(HLP_HAVE_CUDA)
#include "comm/cuda_timing.h"
#include "comm/nccl_communicator.h"
#endif

namespace hlp::train {

NodeLoad node_load(MPI_Comm world, int requested_threads) {
  MPI_Comm node = comm::split_by_host(world);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  NodeLoad load;
  load.local_ranks = local_ranks;
  load.threads = requested_threads > 0 ? requested_threads : default_threads(local_ranks);
  int64_t local[3] = {local_ranks, load.threads, 0}, node_sum[3] = {0, 0, 0};
  MPI_Allreduce(&local[1], &node_sum[1], 1, MPI_INT64_T, MPI_SUM, node);
  local[1] = node_sum[1];
  local[2] = node_sum[1] > node_cores() ? 1 : 0;
  int64_t job_max[3] = {0, 0, 0};
  MPI_Allreduce(local, job_max, 3, MPI_INT64_T, MPI_MAX, world);
  MPI_Comm_free(&node);
  load.node_ranks = job_max[0];
  load.node_threads = job_max[1];
  load.oversubscribed = job_max[2] != 0;
  return load;
}

RunContext resolve_run_context(const TrainConfig& requested,
                               std::shared_ptr<comm::Communicator> world) {
  RunContext ctx;
  ctx.world = world;
  ctx.log = Log("hlp-train", world->rank());
  // The registry: --strategy pp|tp|cp takes the remaining ranks; what the world allows.
  ctx.spec = parallel::with_defaults(requested.strategy_spec(), world->size());
  parallel::check_composition(ctx.spec);
  parallel::check_world(ctx.spec, world->size());
  ctx.config = requested;
  // the storage of frozen matrices, resolved (auto: the compute dtype); recorded as resolved
  ctx.config.base_dtype = model::resolve_base_dtype(requested.base_dtype, requested.precision);
  ctx.config.pp = ctx.spec.pp;
  ctx.config.tp = ctx.spec.tp;
  ctx.config.cp = ctx.spec.cp;
  ctx.config.ep = ctx.spec.ep;

  auto* mpi_world = dynamic_cast<comm::MpiCommunicator*>(world.get());
  MPI_Comm control;  // node load and device choice get their own communicator
  MPI_Comm_dup(mpi_world ? mpi_world->mpi_comm() : MPI_COMM_WORLD, &control);
  ctx.load = node_load(control, requested.threads);
  ctx.config.threads = ctx.load.threads;  // the resolved value goes into the file's config
  ctx.pools = bound_thread_pools(ctx.config.threads);
  if (ctx.load.oversubscribed)
    ctx.log.info("warning: %lld rank(s) on one node ask for %lld compute threads but the node "
                 "has %d cores; times will be inflated and noisy (lower --threads; recorded as "
                 "oversubscribed = 1)",
                 (long long)ctx.load.node_ranks, (long long)ctx.load.node_threads, node_cores());
  ctx.device = select_device(ctx.config.device, control);
  // auto kernels: fused on the CPU, lean on CUDA; recorded as resolved
  ctx.config.kernels = model::resolve_kernels(requested.kernels, ctx.device.cuda());
  MPI_Comm_free(&control);
  ctx.backend = resolve_comm(ctx.config.comm, ctx.device);
  {  // what the registry refuses on this backend before a communicator is made for it
    parallel::RunFacts facts;
    facts.nccl = ctx.backend == CommBackend::nccl;
    const std::string why = parallel::check_run(ctx.spec, facts);
    if (!why.empty()) throw UserError(why);
  }

  std::shared_ptr<comm::Communicator> compute_world = world;
#if defined(HLP_HAVE_CUDA)
  if (ctx.backend == CommBackend::nccl) {
    if (!mpi_world) throw std::logic_error("run context: the NCCL backend bootstraps over MPI");
    compute_world = comm::NcclCommunicator::create(*mpi_world, ctx.device.device.index(),
                                                   world->options());
    compute_world->set_observer(world->observer());
  }
  // Phase timers synchronise this GPU at their ends (comm/cuda_timing.h); -1 on CPU runs.
  comm::set_timed_cuda_device(ctx.device.cuda() ? ctx.device.device.index() : -1);
#endif
  // The dp x pp x cp x tp mesh (collective). Data parallelism runs over its dp axis; the pp, cp
  // and tp partners of one dp rank read the same rows.
  ctx.mesh = std::make_shared<parallel::Mesh>(compute_world, ctx.spec.tp, ctx.spec.pp,
                                              ctx.spec.cp, ctx.spec.ep);
  if (ctx.config.resume)
    ctx.resume = find_checkpoint(ctx.config.checkpoint_dir, world->rank(),
                                 to_string(ctx.config.strategy), ctx.mesh->shape_string());
  return ctx;
}

}  // namespace hlp::train
