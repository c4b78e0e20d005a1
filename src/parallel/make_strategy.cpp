#include "common/error.h"
#include "parallel/ddp.h"
#include "parallel/fsdp.h"
#include "parallel/replicated.h"

namespace hlp::parallel {

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options) {
  const std::string& s = options.name;
  if (s == "single") {
    if (options.dp_comm && options.dp_comm->size() != 1)
      throw user_error("--strategy single runs on 1 rank, but ", options.dp_comm->size(),
                       " were launched; use ddp, fsdp or fsdp2 for more ranks");
    auto r = std::make_unique<ReplicatedStrategy>(options);
    r->init();
    return r;
  }
  if (s == "ddp") {
    auto r = std::make_unique<DdpStrategy>(options);
    r->init();
    return r;
  }
  if (s == "fsdp") return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/false);
  if (s == "fsdp2") return std::make_unique<ShardedStrategy>(options, /*per_parameter=*/true);
  throw user_error("--strategy ", s, " is not implemented yet in this build (available: single, "
                   "ddp, fsdp, fsdp2)");
}

}  // namespace hlp::parallel
