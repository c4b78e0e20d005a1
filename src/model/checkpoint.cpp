#include "model/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace hlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved input: the function and the RNG state at forward.
struct CheckpointState : torch::CustomClassHolder {
  BlockFunction fn;
  torch::Tensor rng_state;
  bool input_requires_grad = false;
};

torch::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               c10::intrusive_ptr<CheckpointState> state) {
    state->rng_state = cpu_rng_state();
    torch::Tensor y;
    {
      torch::NoGradGuard no_grad;
      y = state->fn(x);
    }
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(
        ctx->saved_data["state"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(state->input_requires_grad);
    const auto rng_now = cpu_rng_state();
    set_cpu_rng_state(state->rng_state);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      y = state->fn(x);
    }
    set_cpu_rng_state(rng_now);
    if (y.requires_grad()) torch::autograd::backward({y}, {grad_outputs[0]});
    return {state->input_requires_grad ? x.grad() : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const BlockFunction& fn, const torch::Tensor& x, bool params_require_grad) {
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = fn;
  state->input_requires_grad = x.requires_grad();
  torch::Tensor input = x;
  if (!x.requires_grad()) {
    if (!params_require_grad) return fn(x);  // nothing to differentiate
    input = x.detach().requires_grad_(true);
  }
  return CheckpointFunction::apply(input, state)[0];
}

}  // namespace hlp::model
