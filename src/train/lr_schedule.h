#pragma once
// Learning rate at a step: linear warm-up to the peak, then cosine decay to min_ratio * peak.
#include <algorithm>
#include <cmath>

namespace hlp::train {

struct LrSchedule {
  double peak_lr = 1e-3;
  int warmup_steps = 0;
  int total_steps = 1;
  double min_ratio = 0.1;

  // step is 0-based: the LR used by the optimizer update of step `step`.
  double at(int step) const {
    if (warmup_steps > 0 && step < warmup_steps) return peak_lr * (step + 1) / warmup_steps;
    const int decay_steps = std::max(1, total_steps - warmup_steps);
    const double progress = std::clamp(double(step - warmup_steps) / decay_steps, 0.0, 1.0);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    return peak_lr * (min_ratio + (1.0 - min_ratio) * cosine);
  }
};

}  // namespace hlp::train
