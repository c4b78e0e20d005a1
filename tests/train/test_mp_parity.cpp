// Pipeline and tensor parallelism (and their compositions with data parallelism) reproduce the
// single-process loss trajectory: same seed, same global batch, tiny model, 5 steps, 1e-5
// relative in float32, with LoRA and with full finetuning (which also trains the tied
// embedding that the first and last pipeline stages share).
// At 2 ranks: pp2 x {gpipe, 1f1b} x {uniform, balanced}, tp2.
// At 4 ranks: pp4 x {gpipe, 1f1b} x {uniform, balanced}, dp2 x pp2, dp2 x tp2, tp2 x pp2.
#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace hlp;

namespace {

constexpr double kRelTol = 1e-5;

void check_parity(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i << ": got " << got[i] << " want " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= kRelTol * std::abs(want[i]));
  }
}

const std::vector<double>& reference(int lora_rank) {
  static std::map<int, std::vector<double>> cache;
  auto it = cache.find(lora_rank);
  if (it == cache.end()) {
    auto losses = train::train(test::tiny_config("single", lora_rank), test::self()).losses;
    REQUIRE(losses.back() < losses.front());  // the loss must move, or parity proves nothing
    it = cache.emplace(lora_rank, losses).first;
  }
  return it->second;
}

train::TrainConfig mp_config(const std::string& strategy, int lora_rank, int pp, int tp) {
  auto c = test::tiny_config(strategy, lora_rank);
  c.pp = pp;
  c.tp = tp;
  return c;
}

}  // namespace

TEST_CASE("pipeline: pp = world size reproduces single for every schedule and split",
          "[parity][pp]") {
  const int n = test::world()->size();
  for (int lora_rank : {8, 0})
    for (const char* schedule : {"gpipe", "1f1b"})
      for (const char* split : {"uniform", "balanced"}) {
        SECTION("pp" + std::to_string(n) + " " + schedule + " " + split + " lora_rank " +
                std::to_string(lora_rank)) {
          auto c = mp_config("pp", lora_rank, n, 1);
          c.pp_schedule = schedule;
          c.pp_split = split;
          auto o = train::train(c, test::world());
          check_parity(o.losses, reference(lora_rank));
          REQUIRE(o.pipeline.has_value());
          CHECK(o.pipeline->stage_first_layer.size() == size_t(n));
          CHECK(o.pipeline->stage_first_layer.front() == 0);
          CHECK(o.pipeline->micro_batches == 4);  // G 8 / B 2
          CHECK(o.pipeline->bubble_fraction_theory == Approx(double(n - 1) / (4 + n - 1)));
          CHECK(o.pipeline->schedule == schedule);
          for (double s : o.pipeline->stage_cost_measured_s) CHECK(s > 0);
          // parameters and gradients: this stage only, a strict part of the model
          CHECK(o.held.param_bytes < 4 * o.params_total);
        }
      }
}

TEST_CASE("pipeline: an explicit split is honoured in the run", "[pp]") {
  const int n = test::world()->size();
  auto c = mp_config("pp", 8, n, 1);
  c.pp_split = n == 2 ? "0,3" : "0,1,2,3";
  c.steps = 2;
  auto o = train::train(c, test::world());
  REQUIRE(o.pipeline.has_value());
  CHECK(o.pipeline->stage_first_layer ==
        (n == 2 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{0, 1, 2, 3}));
  CHECK(o.pipeline->split == c.pp_split);
}

TEST_CASE("tensor parallel and compositions reproduce single", "[parity][tp]") {
  const int n = test::world()->size();
  struct Case {
    const char* strategy;
    int pp, tp;
  };
  std::vector<Case> cases;
  if (n == 2) cases = {{"tp", 1, 2}};
  if (n == 4) cases = {{"ddp", 2, 1}, {"ddp", 1, 2}, {"pp", 2, 2}, {"tp", 2, 2}};
  for (int lora_rank : {8, 0})
    for (const auto& k : cases) {
      SECTION(std::string(k.strategy) + " pp" + std::to_string(k.pp) + " tp" +
              std::to_string(k.tp) + " lora_rank " + std::to_string(lora_rank)) {
        auto c = mp_config(k.strategy, lora_rank, k.pp, k.tp);
        auto o = train::train(c, test::world());
        check_parity(o.losses, reference(lora_rank));
      }
    }
}

TEST_CASE("tensor parallel: partners with different batches are detected", "[tp]") {
  auto mesh = std::make_shared<parallel::Mesh>(test::world(), /*tp=*/2, /*pp=*/1);
  parallel::StrategyOptions so;
  so.name = "tp";
  so.model = model::resolve_model_config("tiny", "", "chunked").with_vocab(258);
  so.lora = model::make_lora_config(8, 16, 0.0, "q_proj,k_proj,v_proj,o_proj");
  so.mesh = mesh;
  so.dp_comm = mesh->dp_comm();
  so.seq_len = 16;
  auto strategy = parallel::make_strategy(so);
  // rank-dependent tokens: tp partners disagree
  auto tokens = torch::full({2, 16}, 3 + test::world()->rank(), torch::kLong);
  std::vector<parallel::MicroBatch> mbs{{tokens, tokens}};
  parallel::PhaseTimes times;
  CHECK_THROWS_AS(strategy->forward_backward(mbs, 0, times), UserError);
}

TEST_CASE("model-parallel configurations that cannot run are user errors", "[pp][tp]") {
  const int n = test::world()->size();
  CHECK_THROWS_AS(train::train(mp_config("pp", 8, 1, 1), test::world()), UserError);
  CHECK_THROWS_AS(train::train(mp_config("tp", 8, 1, 1), test::world()), UserError);
  CHECK_THROWS_AS(train::train(mp_config("fsdp2", 8, n, 1), test::world()), UserError);
  auto c = mp_config("pp", 8, n, 1);
  c.pp_split = "0,0,0,0";
  CHECK_THROWS_AS(train::train(c, test::world()), UserError);
}
