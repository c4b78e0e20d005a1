#pragma once
// Dynamic loss scaling for fp16 compute, the state machine of torch.cuda.amp.GradScaler:
// the strategies back-propagate scale() x loss, so small fp16 gradients do not flush to zero;
// after the backward the trainer looks at the global gradient norm of the scaled gradients
// (one all-reduce, the same value on every rank, so every rank takes the same branch):
//   not finite  some fp16 gradient overflowed: skip the optimizer update, scale *= backoff,
//               the count of clean steps restarts;
//   finite      unscale (1 / scale folded into the optimizer's gradient factor), update; after
//               growth_interval clean steps in a row, scale *= growth.
// The scale may not fall below min_scale: a model whose gradients overflow even there diverges
// in fp16, and the trainer stops (exit 3) instead of skipping forever.
// Disabled (fp32, bf16): scale() is 1, nothing is ever skipped, and the trainer keeps its
// non-finite stop for the gradient norm too.
#include <cstdint>

namespace hlp::train {

struct LossScalerOptions {
  bool enabled = false;
  double init_scale = 65536.0;   // 2^16, GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
  double min_scale = 1.0;          // below this the run stops
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options);

  bool enabled() const { return options_.enabled; }
  double scale() const { return scale_; }  // what the next backward multiplies the loss by

  // After a step's backward, given whether the global norm of the scaled gradients is finite.
  // Returns true when the optimizer update must be skipped (overflow), and moves the scale.
  bool update(bool grads_finite);

  // The scale fell below min_scale (only after an overflow): the run cannot continue in fp16.
  bool below_floor() const { return options_.enabled && scale_ < options_.min_scale; }

  int64_t clean_steps() const { return clean_steps_; }      // since the last change of scale
  int64_t skipped_steps() const { return skipped_steps_; }  // over the run

  // Checkpointing: (scale, clean steps) restore the state machine exactly.
  void load_state(double scale, int64_t clean_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace hlp::train
