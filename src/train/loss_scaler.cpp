#include "train/loss_scaler.h"

#include "common/error.h"

namespace hlp::train {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.enabled ? options.init_scale : 1.0) {
  if (!options_.enabled) return;
  if (!(options_.init_scale >= options_.min_scale) || !(options_.init_scale < 1e300))
    throw user_error("--loss-scale-init must be a finite number >= ", options_.min_scale,
                     " (got ", options_.init_scale, ")");
  if (options_.growth_interval < 1)
    throw user_error("--loss-scale-growth-interval must be >= 1 (got ",
                     options_.growth_interval, ")");
}

bool LossScaler::update(bool grads_finite) {
  if (!options_.enabled) return false;
  if (!grads_finite) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_steps_;
    return true;
  }
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  return false;
}

void LossScaler::load_state(double scale, int64_t clean_steps) {
  if (!options_.enabled) return;
  scale_ = scale;
  clean_steps_ = clean_steps;
}

}  // namespace hlp::train
