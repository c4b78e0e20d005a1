// bf16 compute (fp32 master weights of what trains, fp32 reduction and Adam state; frozen
// matrices in fp32 or, by default, bf16) runs on CPU and stays close to fp32; the evaluation
// loss is the same for every strategy and does not change training.
#include "catch_compat.h"

#include <cmath>

#include "train/trainer.h"
#include "train_test_util.h"

using namespace hlp;

TEST_CASE("bf16 runs on CPU with fp32 master weights and tracks fp32", "[precision]") {
  for (const char* strategy : {"ddp", "fsdp2"})
  for (auto base : {hlp::model::BaseDtype::fp32, hlp::model::BaseDtype::automatic}) {
    auto c = test::tiny_config(strategy, 8);
    const auto fp32 = train::train(c, test::world());
    c.precision = hlp::model::Precision::bf16;
    c.base_dtype = base;  // auto: bf16 under bf16 compute
    const auto bf16 = train::train(c, test::world());
    REQUIRE(bf16.losses.size() == fp32.losses.size());
    CHECK(bf16.optimizer_bytes == fp32.optimizer_bytes);  // fp32 Adam state either way
    CHECK(bf16.held.grad_bytes == fp32.held.grad_bytes);  // fp32 gradients of what trains
    if (base == hlp::model::BaseDtype::fp32)
      CHECK(bf16.held.param_bytes == fp32.held.param_bytes);  // fp32 master weights
    else  // the frozen matrices in 2 bytes
      CHECK(bf16.held.param_bytes < 0.6 * double(fp32.held.param_bytes));
    bool differs = false;
    for (size_t i = 0; i < fp32.losses.size(); ++i) {
      INFO(strategy << " step " << i << " fp32 " << fp32.losses[i] << " bf16 " << bf16.losses[i]);
      CHECK(std::abs(bf16.losses[i] - fp32.losses[i]) < 0.02 * fp32.losses[i]);
      differs |= bf16.losses[i] != fp32.losses[i];
    }
    CHECK(differs);  // bf16 really ran in lower precision
  }
}

TEST_CASE("eval loss is computed every K steps and agrees across strategies", "[eval]") {
  std::vector<std::vector<double>> evals;
  std::vector<std::vector<double>> losses;
  for (const char* strategy : {"ddp", "fsdp", "fsdp2"}) {
    auto c = test::tiny_config(strategy, 8);
    c.eval_every = 2;
    std::vector<double> eval;
    train::TrainHooks hooks;
    hooks.on_step = [&](const train::StepReport& r, parallel::Strategy&) {
      if ((r.step + 1) % 2 == 0) {
        CHECK(std::isfinite(r.eval_loss));
        eval.push_back(r.eval_loss);
      } else {
        CHECK(std::isnan(r.eval_loss));
      }
    };
    losses.push_back(train::train(c, test::world(), hooks).losses);
    evals.push_back(eval);
  }
  auto plain = test::tiny_config("ddp", 8);
  CHECK(train::train(plain, test::world()).losses == losses[0]);  // eval does not train
  for (size_t s = 1; s < evals.size(); ++s)
    for (size_t i = 0; i < evals[0].size(); ++i)
      CHECK(evals[s][i] == Approx(evals[0][i]).epsilon(1e-5));
}
