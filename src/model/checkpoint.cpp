#include "model/checkpoint.h"

#include "model/half_emulation.h"

#include <ATen/CPUGeneratorImpl.h>
#include "model/autocast_state.h"
#include <torch/version.h>

#include <mutex>

namespace hlp::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved input: the function and the RNG state at forward.
// The precision context of the forward (thread-local), which the recompute in backward must see
// again: strategies leave autocast before backward, as torch.utils.checkpoint expects too.
struct PrecisionContext {
  bool cpu_autocast = false, cuda_autocast = false, half_emulation = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static PrecisionContext current() {
    PrecisionContext p;
    p.cpu_autocast = autocast_enabled(at::kCPU);
    p.cpu_dtype = autocast_dtype(at::kCPU);
    p.cuda_autocast = autocast_enabled(at::kCUDA);
    p.cuda_dtype = autocast_dtype(at::kCUDA);
    p.half_emulation = half_emulation_enabled();
    return p;
  }
  void apply() const {
    set_autocast(at::kCPU, cpu_autocast, cpu_dtype);
    set_autocast(at::kCUDA, cuda_autocast, cuda_dtype);
  }
};

// What backward needs besides the saved input: the function, the RNG state and the precision
// context at forward.
struct CheckpointState : torch::CustomClassHolder {
  BlockFunction fn;
  torch::Tensor rng_state;
  PrecisionContext precision;
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
    state->precision = PrecisionContext::current();
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
      const PrecisionContext outside = PrecisionContext::current();
      state->precision.apply();
      HalfEmulationGuard half(state->precision.half_emulation);
      y = state->fn(x);
      outside.apply();
      if (state->precision.cpu_autocast || state->precision.cuda_autocast)
        at::autocast::clear_cache();  // the recompute's cached casts of the weights
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
