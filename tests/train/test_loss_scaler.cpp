// The dynamic loss scaler's state machine (train/loss_scaler.h), step by step: growth after
// growth_interval clean steps, back-off and skip on overflow, the floor, checkpoint state, and
// that a disabled scaler (fp32 / bf16) never scales or skips.
#include "catch_compat.h"

#include "common/error.h"
#include "train/loss_scaler.h"

using hlp::train::LossScaler;
using hlp::train::LossScalerOptions;

namespace {
LossScalerOptions enabled(double init, int64_t interval) {
  LossScalerOptions o;
  o.enabled = true;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}
}  // namespace

TEST_CASE("loss scaler: defaults are GradScaler's", "[loss_scaler]") {
  LossScalerOptions o;
  CHECK(o.init_scale == 65536.0);
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
}

TEST_CASE("loss scaler: disabled scales by 1 and never skips", "[loss_scaler]") {
  LossScaler s(LossScalerOptions{});
  CHECK_FALSE(s.enabled());
  for (int i = 0; i < 5; ++i) {
    CHECK(s.scale() == 1.0);
    CHECK_FALSE(s.update(false));  // even a non-finite norm: the trainer's stop handles it
    CHECK_FALSE(s.below_floor());
  }
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("loss scaler: grows after growth_interval clean steps in a row", "[loss_scaler]") {
  LossScaler s(enabled(1024, 3));
  CHECK_FALSE(s.update(true));
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 1024);
  CHECK(s.clean_steps() == 2);
  CHECK_FALSE(s.update(true));  // third clean step: x2, count restarts
  CHECK(s.scale() == 2048);
  CHECK(s.clean_steps() == 0);
  CHECK_FALSE(s.update(true));
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 2048);
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 4096);
  CHECK(s.skipped_steps() == 0);
}

TEST_CASE("loss scaler: an overflow skips, halves and restarts the clean count",
          "[loss_scaler]") {
  LossScaler s(enabled(65536, 3));
  CHECK_FALSE(s.update(true));
  CHECK_FALSE(s.update(true));
  CHECK(s.update(false));  // would have grown on this step; overflow instead
  CHECK(s.scale() == 32768);
  CHECK(s.clean_steps() == 0);
  CHECK(s.update(false));
  CHECK(s.scale() == 16384);
  CHECK(s.skipped_steps() == 2);
  CHECK_FALSE(s.update(true));
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 16384);  // two clean steps only since the overflow
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 32768);
  CHECK_FALSE(s.below_floor());
}

TEST_CASE("loss scaler: falling below the floor is reported, not hidden", "[loss_scaler]") {
  LossScaler s(enabled(2, 2000));
  CHECK(s.update(false));
  CHECK(s.scale() == 1.0);
  CHECK_FALSE(s.below_floor());  // 1 is still allowed
  CHECK(s.update(false));
  CHECK(s.scale() == 0.5);
  CHECK(s.below_floor());
}

TEST_CASE("loss scaler: checkpoint state restores the state machine", "[loss_scaler]") {
  LossScaler a(enabled(65536, 4));
  a.update(true);
  a.update(false);
  a.update(true);
  a.update(true);
  LossScaler b(enabled(65536, 4));
  b.load_state(a.scale(), a.clean_steps());
  for (bool finite : {true, true, false, true}) {
    CHECK(a.update(finite) == b.update(finite));
    CHECK(a.scale() == b.scale());
    CHECK(a.clean_steps() == b.clean_steps());
  }
  LossScaler off(LossScalerOptions{});
  off.load_state(8.0, 3);  // a disabled scaler stays at 1 (an fp32 resume of an fp16 run)
  CHECK(off.scale() == 1.0);
}

TEST_CASE("loss scaler: impossible options are user errors", "[loss_scaler]") {
  CHECK_THROWS_AS(LossScaler(enabled(0.5, 10)), hlp::UserError);
  CHECK_THROWS_AS(LossScaler(enabled(1e308 * 10, 10)), hlp::UserError);
  CHECK_THROWS_AS(LossScaler(enabled(65536, 0)), hlp::UserError);
}
