// The strategy registry (parallel/registry.h): its tables are complete, the composite name is
// the one the result files record, and each rule refuses what hlp-train cannot run with a
// message that says what to change. No LibTorch, no MPI.
#include "catch_compat.h"

#include <set>
#include <string>

#include "common/error.h"
#include "model/config.h"
#include "parallel/registry.h"

using namespace hlp::parallel;

namespace {

std::string error_of(void (*f)(const StrategySpec&), const StrategySpec& spec) {
  try {
    f(spec);
  } catch (const hlp::UserError& e) {
    return e.what();
  }
  return "";
}

std::string world_error(const StrategySpec& spec, int world) {
  try {
    check_world(spec, world);
  } catch (const hlp::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("registry: every strategy and axis has one entry with a unique name", "[registry]") {
  std::set<std::string> names;
  for (StrategyKind k : {StrategyKind::single, StrategyKind::ddp, StrategyKind::fsdp,
                         StrategyKind::fsdp2, StrategyKind::pp, StrategyKind::tp,
                         StrategyKind::cp}) {
    const StrategyEntry& e = strategy_entry(k);
    CHECK(e.kind == k);
    CHECK(names.insert(e.name).second);
    CHECK(parse_strategy(e.name) == k);
    for (MeshAxis a : e.composes_with) CHECK(axis_entry(a).axis == a);  // an entry per axis
    if (e.axis) CHECK(e.dp == DpKind::ddp);  // pp / tp / cp: ddp over what the axis leaves
  }
  CHECK(strategy_names().size() == strategy_entries().size());
  std::set<std::string> axes;
  for (const auto& a : axis_entries()) CHECK(axes.insert(a.name).second);
  CHECK(axes == std::set<std::string>{"pp", "tp", "cp", "ep"});
  CHECK_THAT(error_of([](const StrategySpec&) { parse_strategy("zero3"); }, {}),
             Catch::Contains("--strategy: unknown value 'zero3'") &&
                 Catch::Contains("single, ddp, fsdp, fsdp2, pp, tp or cp"));
}

TEST_CASE("registry: one composite name, axes in pp, tp, cp order", "[registry]") {
  CHECK(StrategySpec{StrategyKind::single}.name() == "single");
  CHECK(StrategySpec{StrategyKind::fsdp2, 1, 2, 1}.name() == "fsdp2+tp2");
  CHECK(StrategySpec{StrategyKind::ddp, 2, 2, 1}.name() == "ddp+pp2+tp2");  // not ddp+tp2+pp2
  CHECK(StrategySpec{StrategyKind::ddp, 1, 2, 2}.name() == "ddp+tp2+cp2");
  CHECK(StrategySpec{StrategyKind::pp, 4, 2, 1}.name() == "pp+tp2");  // its own axis is implied
  CHECK(StrategySpec{StrategyKind::tp, 2, 2, 1}.name() == "tp+pp2");
  CHECK(StrategySpec{StrategyKind::cp, 1, 2, 4}.name() == "cp+tp2");
  CHECK(StrategySpec{StrategyKind::cp, 1, 1, 4}.name() == "cp");
}

TEST_CASE("registry: a pp / tp / cp strategy takes the ranks the other axes leave", "[registry]") {
  CHECK(with_defaults({StrategyKind::pp}, 4).pp == 4);
  CHECK(with_defaults({StrategyKind::pp, 1, 2, 1}, 8).pp == 4);
  CHECK(with_defaults({StrategyKind::tp, 2, 1, 1}, 4).tp == 2);
  CHECK(with_defaults({StrategyKind::tp, 1, 1, 2}, 4).tp == 2);  // cp counts among the others
  CHECK(with_defaults({StrategyKind::cp, 1, 2, 1}, 8).cp == 4);
  CHECK(with_defaults({StrategyKind::pp, 3, 1, 1}, 8).pp == 3);  // given: kept
  CHECK(with_defaults({StrategyKind::ddp}, 8).model_ranks() == 1);
  CHECK(with_defaults({StrategyKind::pp}, 1).pp == 1);  // nothing to take
}

TEST_CASE("registry: what composes, and what each refusal says", "[registry]") {
  CHECK(error_of(check_composition, {StrategyKind::ddp, 2, 2, 1}).empty());
  CHECK(error_of(check_composition, {StrategyKind::fsdp2, 1, 2, 2}).empty());
  CHECK(error_of(check_composition, {StrategyKind::tp, 1, 1, 2}).empty());
  CHECK_THAT(error_of(check_composition, {StrategyKind::single, 1, 2, 1}),
             Catch::Contains("--strategy single does not combine with --tp") &&
                 Catch::Contains("runs on one rank"));
  CHECK_THAT(error_of(check_composition, {StrategyKind::fsdp, 1, 1, 2}),
             Catch::Contains("--strategy fsdp does not combine with --cp") &&
                 Catch::Contains("fsdp2"));
  CHECK_THAT(error_of(check_composition, {StrategyKind::ddp, 2, 1, 2}),
             Catch::Contains("--cp with --pp is not implemented") &&
                 Catch::Contains("combine --cp with ddp, fsdp2 or --tp"));
  // the strategy's own axis counts although its size is still 1
  CHECK_THAT(error_of(check_composition, {StrategyKind::pp, 1, 1, 2}),
             Catch::Contains("--cp with --pp is not implemented"));
  CHECK_THAT(error_of(check_composition, {StrategyKind::cp, 2, 1, 1}),
             Catch::Contains("--cp with --pp is not implemented"));
  CHECK_THAT(error_of(check_composition, {StrategyKind::ddp, 1, 0, 1}),
             Catch::Contains("--tp must be >= 1"));
}

TEST_CASE("registry: the world size", "[registry]") {
  CHECK(world_error({StrategyKind::ddp, 2, 2, 1}, 8).empty());
  CHECK(world_error({StrategyKind::single}, 1).empty());
  CHECK_THAT(world_error({StrategyKind::single}, 2),
             Catch::Contains("--strategy single runs on 1 rank, but 2 were launched"));
  CHECK_THAT(world_error({StrategyKind::ddp, 1, 2, 1}, 3),
             Catch::Contains("world size 3 is not divisible by tp (2) x pp (1) = 2"));
  CHECK_THAT(world_error({StrategyKind::ddp, 1, 1, 2}, 3), Catch::Contains("x cp (2)"));
  CHECK_THAT(world_error({StrategyKind::pp}, 1),
             Catch::Contains("--strategy pp needs --pp N with N >= 2"));
  const MeshShape shape = mesh_shape({StrategyKind::ddp, 2, 2, 1}, 8);
  CHECK(shape.dp == 2);
  CHECK(shape.world() == 8);
}

TEST_CASE("registry: the run's rules per axis, with hlp-train's messages", "[registry]") {
  hlp::model::ModelConfig tiny;  // GAGS: 4 attention heads, 2 KV heads, d 64
  RunFacts facts;
  facts.model = &tiny;
  facts.seq_len = 32;
  CHECK(check_run({StrategyKind::tp, 1, 2, 1}, facts).empty());
  CHECK_THAT(check_run({StrategyKind::tp, 1, 4, 1}, facts),
             Catch::Contains("--tp 4 does not divide the model's attention KV heads (2)"));
  facts.lora_dropout = 0.1;
  CHECK_THAT(check_run({StrategyKind::tp, 1, 2, 1}, facts),
             Catch::Contains("--lora-dropout 0.1 is not supported with --tp > 1"));
  CHECK(check_run({StrategyKind::ddp}, facts).empty());  // dropout is fine without tp
  facts.lora_dropout = 0;
  hlp::model::ModelConfig checkpointed = tiny;
  checkpointed.activation_checkpointing = true;
  RunFacts ckpt = facts;
  ckpt.model = &checkpointed;
  CHECK_THAT(check_run({StrategyKind::tp, 1, 2, 1}, ckpt),
             Catch::Contains("--activation-checkpointing is not supported with --tp"));
  CHECK_THAT(check_run({StrategyKind::pp, 5, 1, 1}, facts),
             Catch::Contains("--pp 5 asks for more pipeline stages than the model has layers (4)"));
  facts.pp_schedule = PipeSchedule::interleaved;
  facts.pp_virtual = 2;
  facts.micro_batches = 3;
  CHECK_THAT(check_run({StrategyKind::pp, 2, 1, 1}, facts),
             Catch::Contains("multiple of --pp 2"));
  facts.micro_batches = 4;
  CHECK(check_run({StrategyKind::pp, 2, 1, 1}, facts).empty());
  CHECK_THAT(check_run({StrategyKind::pp, 4, 1, 1}, facts), Catch::Contains("model chunks"));
  ckpt.pp_schedule = PipeSchedule::zb_h1;
  CHECK_THAT(check_run({StrategyKind::pp, 2, 1, 1}, ckpt),
             Catch::Contains("cannot split the backward of a checkpointed block"));
  facts = RunFacts{};
  facts.seq_len = 34;
  CHECK_THAT(check_run({StrategyKind::cp, 1, 1, 2}, facts),
             Catch::Contains("--seq-len 34 cannot be cut into 4 equal pieces (cp 2, zigzag"));
  facts.cp_layout = CpLayout::contiguous;
  CHECK(check_run({StrategyKind::cp, 1, 1, 2}, facts).empty());
  facts.nccl = true;  // the exchanges' order is the same on every rank (registry.cpp)
  CHECK(check_run({StrategyKind::cp, 1, 1, 2}, facts).empty());
  // the all-to-all schemes need the heads (of a tp rank) to divide over cp: tiny has 2 G heads
  // and 4 query / 2 KV attention heads
  facts = RunFacts{};
  facts.model = &tiny;
  facts.cp_scheme = CpScheme::alltoall;
  CHECK(check_run({StrategyKind::cp, 1, 1, 2}, facts).empty());
  CHECK_THAT(check_run({StrategyKind::cp, 1, 1, 4}, facts),
             Catch::Contains("--cp-scheme alltoall shards the gated-delta heads over the cp ranks: "
                             "2 do not divide over --cp 4; use --cp-scheme chain or allgather"));
  CHECK_THAT(check_run({StrategyKind::ddp, 1, 2, 2}, facts),
             Catch::Contains("1 a tp rank do not divide over --cp 2"));
  facts.cp_scheme = CpScheme::chain;
  facts.cp_attention = CpAttention::alltoall;
  CHECK(check_run({StrategyKind::cp, 1, 1, 4}, facts).empty());  // 2 KV heads repeated twice
  CHECK_THAT(check_run({StrategyKind::cp, 1, 1, 8}, facts),
             Catch::Contains("--cp-attention alltoall shards the attention heads over the cp "
                             "ranks: 4 do not divide over --cp 8; use --cp-attention ring"));
  // without a model (hlp-sweep) the model's rules are not checked
  CHECK(check_run({StrategyKind::tp, 1, 64, 1}, RunFacts{}).empty());
}

TEST_CASE("registry: the meshes hlp-plan lists for a rank count", "[registry]") {
  std::vector<std::string> names;
  for (const auto& spec : single_axis_meshes(4)) names.push_back(spec.name());
  // ep takes no ranks of its own: every size dividing the ranks, under ddp and fsdp2 (whether
  // the model has experts is check_run's)
  CHECK(names == std::vector<std::string>{"single", "ddp", "fsdp", "fsdp2", "ddp+pp2",
                                          "fsdp2+pp2", "pp", "ddp+tp2", "fsdp2+tp2", "tp",
                                          "ddp+cp2", "fsdp2+cp2", "cp", "ddp+ep2", "fsdp2+ep2",
                                          "ddp+ep4", "fsdp2+ep4"});
  CHECK(single_axis_meshes(1).size() == 1);
}

TEST_CASE("registry: expert parallelism folds into the data-parallel ranks", "[registry][ep]") {
  StrategySpec ep{StrategyKind::fsdp2};
  ep.ep = 4;
  CHECK(ep.name() == "fsdp2+ep4");
  CHECK(ep.model_ranks() == 1);  // it multiplies nothing
  check_world(ep, 4);
  CHECK(mesh_shape(ep, 4).dp == 4);
  CHECK(mesh_shape(ep, 4).ep == 4);
  // ep divides dp x cp: cp 2 x dp 2 holds ep 4; dp 2 alone does not
  StrategySpec cp_ep{StrategyKind::ddp, 1, 1, 2, 4};
  CHECK(cp_ep.name() == "ddp+cp2+ep4");
  check_world(cp_ep, 8);
  CHECK_THROWS_WITH(check_world(ep, 2),
                    Catch::Contains("--ep 4 does not divide the data-parallel ranks (dp = 2)"));
  CHECK_THROWS_WITH(check_world(cp_ep, 2),
                    Catch::Contains("(dp 1 x cp 2 = 2)"));
  StrategySpec single_ep{StrategyKind::single};
  single_ep.ep = 2;
  CHECK_THROWS_WITH(check_composition(single_ep),
                    Catch::Contains("--strategy single does not combine with --ep"));
  StrategySpec flat_ep{StrategyKind::fsdp};
  flat_ep.ep = 2;
  CHECK_THROWS_WITH(check_composition(flat_ep),
                    Catch::Contains("--strategy fsdp does not combine with --ep"));
  // the model's rules: experts to split, and ep dividing them
  hlp::model::ModelConfig moe = hlp::model::preset("small-moe");
  hlp::model::ModelConfig dense = hlp::model::preset("small");
  RunFacts facts;
  facts.model = &moe;
  CHECK(check_run(ep, facts).empty());  // 16 experts over 4
  StrategySpec ep3{StrategyKind::ddp};
  ep3.ep = 3;
  CHECK_THAT(check_run(ep3, facts), Catch::Contains("--ep 3 does not divide the model's experts (16"));
  facts.model = &dense;
  CHECK_THAT(check_run(ep, facts), Catch::Contains("this model has none"));
  // mesh coordinates: q = dp cp-major; ep consecutive q share a group
  const MeshShape shape = make_mesh_shape(8, 1, 1, 2, 4);  // dp 4 x cp 2, ep 4
  CHECK(mesh_coord(shape, 0).ep == 0);
  CHECK(mesh_coord(shape, 3).ep == 3);
  CHECK(mesh_coord(shape, 5).ep == 1);
}
