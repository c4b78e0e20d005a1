// Checkpoint and resume: a run stopped by SIGTERM (on one rank only) after a checkpoint, then
// resumed, produces the same losses as the uninterrupted run.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_test_util.h"

using namespace hlp;

TEST_CASE("SIGTERM checkpoints, resume continues the same loss trajectory", "[resume]") {
  for (const char* strategy : {"ddp", "fsdp", "fsdp2"}) {
    SECTION(strategy) {
      auto c = test::tiny_config(strategy, 8);
      c.steps = 6;
      const auto full = train::train(c, test::world()).losses;

      const std::string dir = "/tmp/hlp_test_resume_" + std::string(strategy) + "_n" +
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

TEST_CASE("resume refuses a checkpoint of another strategy", "[resume]") {
  auto c = test::tiny_config("ddp", 8);
  c.steps = 1;
  c.checkpoint_dir = "/tmp/hlp_test_resume_mismatch_n" + std::to_string(test::world()->size());
  train::train(c, test::world());
  c.strategy = "fsdp2";
  c.resume = true;
  CHECK_THROWS_WITH(train::train(c, test::world()), Catch::Contains("written by strategy ddp"));
}
