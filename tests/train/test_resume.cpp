// Checkpoint and resume: a run stopped by SIGTERM (on one rank only) after a checkpoint, then
// resumed, produces the same losses as the uninterrupted run.
#include "catch_compat.h"

#include <csignal>
#include <filesystem>

#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace hlp;

namespace {
struct Layout {
  const char* name;  // section name
  const char* strategy;
  int pp, tp;        // 0 = every rank (--strategy pp|tp default)
};

// Data-parallel strategies on every rank, pipeline over every rank, tensor parallel over 2
// ranks (tiny has 2 KV heads), and on 4 ranks tp2 x pp2 and the compositions dp2 x pp2 (1f1b,
// balanced split) and dp2 x tp2.
std::vector<Layout> layouts(int world) {
  std::vector<Layout> out = {{"ddp", "ddp", 1, 1}, {"fsdp", "fsdp", 1, 1},
                             {"fsdp2", "fsdp2", 1, 1}, {"pp", "pp", 1, 1}};
  if (world == 2) out.push_back({"tp", "tp", 1, 1});
  if (world == 4) {
    out.push_back({"tp2+pp2", "tp", 2, 2});
    out.push_back({"ddp+pp2", "ddp", 2, 1});
    out.push_back({"fsdp2+tp2", "fsdp2", 1, 2});
  }
  return out;
}
}  // namespace

TEST_CASE("SIGTERM checkpoints, resume continues the same loss trajectory", "[resume]") {
  for (const Layout& layout : layouts(test::world()->size())) {
    const std::string strategy = layout.name;
    SECTION(strategy) {
      auto c = test::tiny_config(layout.strategy, 8);
      c.pp = layout.pp;
      c.tp = layout.tp;
      c.steps = 6;
      const auto full = train::train(c, test::world()).losses;

      const std::string dir = "/tmp/hlp_test_resume_" + strategy + "_n" +
                              std::to_string(test::world()->size());
      if (test::world()->rank() == 0) std::filesystem::remove_all(dir);
      test::world()->barrier();
      c.checkpoint_dir = dir;
      train::TrainHooks hooks;
      hooks.on_step = [](const train::StepReport& r, parallel::Strategy&) {
        // what Slurm does before a time limit, here to one rank only, during step 2
        if (r.step == 2 && test::world()->rank() == test::world()->size() - 1) std::raise(SIGTERM);
      };
      const auto first = train::train(c, test::world(), hooks);
      REQUIRE(first.stopped_by_signal);
      REQUIRE(first.losses.size() == 3);  // steps 0, 1, 2 ran; checkpoint says next step 3

      c.resume = true;
      const auto second = train::train(c, test::world());
      REQUIRE(second.first_step == 3);
      REQUIRE(second.losses.size() == 3);

      std::vector<double> joined(first.losses);
      joined.insert(joined.end(), second.losses.begin(), second.losses.end());
      REQUIRE(joined.size() == full.size());
      for (size_t i = 0; i < full.size(); ++i) {
        INFO(strategy << " step " << i << ": resumed " << joined[i] << " uninterrupted " << full[i]);
        CHECK(joined[i] == Approx(full[i]).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("resume checks the mesh and keeps the checkpoint's stage split", "[resume]") {
  auto c = test::tiny_config("ddp", 8);
  c.pp = 2;
  c.pp_split = "0,1";  // stages of 1 and 3 layers (tiny has 4)
  c.steps = 2;
  c.checkpoint_dir = "/tmp/hlp_test_resume_mesh_n" + std::to_string(test::world()->size());
  if (test::world()->rank() == 0) std::filesystem::remove_all(c.checkpoint_dir);
  test::world()->barrier();
  const auto full = train::train(c, test::world()).losses;
  c.resume = true;
  c.pp = 1;  // same strategy, another mesh
  CHECK_THROWS_WITH(train::train(c, test::world()), Catch::Contains("on mesh dp"));
  // The checkpoint holds step 2 of 2; a resume with steps 3 runs one more step. With the
  // uniform split (2 + 2 layers) the stages' slots would not match the checkpoint's: the
  // checkpoint's split must be used.
  c.pp = 2;
  c.pp_split = "uniform";
  c.steps = 3;
  const auto resumed = train::train(c, test::world());
  CHECK(resumed.first_step == 2);
  CHECK(resumed.losses.size() == 1);
  CHECK(full.size() == 2);
}

TEST_CASE("resume refuses a checkpoint of another strategy", "[resume]") {
  auto c = test::tiny_config("ddp", 8);
  c.steps = 1;
  c.checkpoint_dir = "/tmp/hlp_test_resume_mismatch_n" + std::to_string(test::world()->size());
  train::train(c, test::world());
  c.strategy = hlp::parallel::StrategyKind::fsdp2;
  c.resume = true;
  CHECK_THROWS_WITH(train::train(c, test::world()), Catch::Contains("written by strategy ddp"));
}
