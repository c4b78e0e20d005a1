#pragma once
// AdamW over explicit (parameter, gradient) slots. A slot is whatever this rank updates: a whole
// trainable parameter (single, ddp) or this rank's shard of it (fsdp, fsdp2), so the same
// optimizer serves every strategy and its state bytes are exactly 2 x 4 bytes per slot element.
// The update is PyTorch's torch.optim.AdamW (decoupled weight decay, bias correction):
//   p <- p - lr * wd * p
//   m <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "parallel/optim_slot.h"

namespace hlp::train {

using parallel::OptimSlot;

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(std::vector<OptimSlot> slots, AdamWOptions options);

  // One update with learning rate `lr`; grads are first multiplied by grad_scale (clipping).
  void step(double lr, double grad_scale = 1.0);

  int64_t step_count() const { return step_count_; }
  int64_t state_bytes() const;  // exp_avg + exp_avg_sq, all slots
  const std::vector<OptimSlot>& slots() const { return slots_; }

  // Checkpointing: [exp_avg..., exp_avg_sq...] in slot order, and the step count.
  std::vector<at::Tensor> state_tensors() const;
  void load_state(const std::vector<at::Tensor>& tensors, int64_t step_count);

 private:
  std::vector<OptimSlot> slots_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t step_count_ = 0;
};

}  // namespace hlp::train
