// The factory of the registry's data-parallel kinds (registry.h): one case per DpKind, and the
// stage / slice strategy for any mesh with a pp or tp axis. The rules were checked by the
// registry; they are checked again here for callers that build a strategy directly.
#include <stdexcept>

#include "common/error.h"
#include "parallel/ddp.h"
#include "parallel/fsdp.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "parallel/registry.h"
#include "parallel/replicated.h"

namespace hlp::parallel {

StrategySpec StrategyOptions::spec() const {
  StrategySpec s{strategy};
  if (mesh) {
    s.pp = mesh->shape().pp;
    s.tp = mesh->shape().tp;
    s.cp = mesh->shape().cp;
    s.ep = mesh->shape().ep;
  }
  return s;
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options) {
  const StrategySpec spec = options.spec();
  check_composition(spec);
  check_world(spec, options.mesh ? options.mesh->world_comm()->size()
                                  : options.dp_comm ? options.dp_comm->size() : 1);
  // Pipeline and/or tensor parallel: the stage strategy, whose data-parallel axis averages
  // gradients like ddp or shards the stage like fsdp2 (the kinds that compose with pp / tp).
  if (spec.model_parallel()) return std::make_unique<PipelineStrategy>(options);
  // cp alone: ddp (or fsdp2) over dp x cp; the sequence split is the ContextShard the trainer
  // makes current.
  switch (spec.dp_kind()) {
    case DpKind::single: {
      auto r = std::make_unique<ReplicatedStrategy>(options);
      r->init();
      return r;
    }
    case DpKind::ddp: {
      auto r = std::make_unique<DdpStrategy>(options);
      r->init();
      return r;
    }
    case DpKind::fsdp: return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/false);
    case DpKind::fsdp2: return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/true);
  }
  throw std::logic_error("make_strategy: a data-parallel kind without a factory");
}

}  // namespace hlp::parallel
