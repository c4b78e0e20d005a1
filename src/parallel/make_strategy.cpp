#include "common/error.h"
#include "parallel/ddp.h"
#include "parallel/fsdp.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "parallel/replicated.h"

namespace hlp::parallel {

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options) {
  // `cp` is ddp whose data-parallel group holds the cp ranks too (each with its share of the
  // tokens); the sequence split itself is the ContextShard the trainer makes current.
  const std::string& s = options.name == "cp" ? std::string("ddp") : options.name;
  const int pp = options.mesh ? options.mesh->shape().pp : 1;
  const int tp = options.mesh ? options.mesh->shape().tp : 1;
  if (s == "pp" && pp < 2)
    throw user_error("--strategy pp needs --pp N with N >= 2 (e.g. --strategy pp --pp 2)");
  if (s == "tp" && tp < 2)
    throw user_error("--strategy tp needs --tp N with N >= 2 (e.g. --strategy tp --tp 2)");
  if (pp > 1 || tp > 1) {
    // Pipeline and/or tensor parallel; a data-parallel axis averages gradients like ddp.
    if (s == "fsdp")
      throw user_error("--strategy fsdp with --pp/--tp is not implemented yet; use ddp or "
                       "fsdp2 (or pp / tp) with --pp/--tp");
    if (s == "single" && options.dp_comm && options.dp_comm->size() != 1)
      throw user_error("--strategy single with --pp/--tp needs exactly tp x pp ranks; use ddp "
                       "for a data-parallel axis");
    if (s == "pp" || s == "tp" || s == "ddp" || s == "fsdp2" || s == "single")
      return std::make_unique<PipelineStrategy>(options);
  }
  if (s == "single") {
    if (options.dp_comm && options.dp_comm->size() != 1)
      throw user_error("--strategy single runs on 1 rank, but ", options.dp_comm->size(),
                       " were launched; use ddp, fsdp or fsdp2 for more ranks");
    auto r = std::make_unique<ReplicatedStrategy>(options);
    r->init();
    return r;
  }
  if (s == "ddp") {
    auto r = std::make_unique<DdpStrategy>(options);  // (also `cp`, named so in results)
    r->init();
    return r;
  }
  if (s == "fsdp") return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/false);
  if (s == "fsdp2") return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/true);
  throw user_error("--strategy ", s, " is not implemented yet in this build (available: single, "
                   "ddp, fsdp, fsdp2, pp, tp)");
}

}  // namespace hlp::parallel
