#include "model/chunked_loss.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <vector>

#include "model/autocast_state.h"
#include "model/half_emulation.h"

namespace hlp::model {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

int64_t loss_chunk_rows(int64_t vocab) {
  constexpr int64_t kLogitsPerChunk = int64_t(1) << 24;
  return std::max<int64_t>(1, kLogitsPerChunk / std::max<int64_t>(1, vocab));
}

namespace {

// The dtype the head's matmul runs in: the autocast dtype where autocast is on for the hidden
// states' device (and not held off), else the hidden states' own.
at::ScalarType compute_dtype(const torch::Tensor& hidden) {
  const auto device = hidden.is_cuda() ? at::kCUDA : at::kCPU;
  const auto key = hidden.is_cuda() ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
  if (autocast_enabled(device) && !c10::impl::tls_is_dispatch_key_excluded(key) &&
      at::isFloatingType(hidden.scalar_type()) && hidden.scalar_type() != at::kDouble)
    return autocast_dtype(device);
  return hidden.scalar_type();
}

// One chunk's logits in float32 (float64 stays float64): autocast's matmul in the compute dtype,
// the loss in float32 as autocast runs cross entropy.
torch::Tensor chunk_logits(const torch::Tensor& h, const torch::Tensor& w_t, at::ScalarType cdt) {
  auto logits = model::matmul(h.to(cdt), w_t);  // fp16-emulated on CPU when the switch is on
  return logits.scalar_type() == at::kDouble ? logits : logits.to(at::kFloat);
}

struct Chunk {
  torch::Tensor safe_targets, valid;  // ignored ids (< 0) replaced by 0; 1 where counted
};
Chunk chunk_targets(const torch::Tensor& t, const torch::Tensor& like) {
  const auto valid = t >= 0;
  return {torch::where(valid, t, torch::zeros_like(t)), valid.to(like.scalar_type())};
}

// Forward: per chunk sum(logsumexp(z) - z[target]) over counted rows; nothing of size [N, V]
// outlives its chunk. Backward: per chunk p = softmax(z) - onehot(target), scaled by
// grad / counted and zeroed on ignored rows, in place in the recomputed logits' buffer; then
// d hidden = p W and d weight = p^T hidden in the compute dtype (as autocast's matmul backward).
struct ChunkedCrossEntropyFn : torch::autograd::Function<ChunkedCrossEntropyFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets,
                               int64_t rows) {
    RECORD_FUNCTION("hlp::chunked_linear_cross_entropy", std::vector<c10::IValue>());
    const auto cdt = compute_dtype(hidden);
    NoAutocastGuard no_autocast;  // casts are explicit below
    const auto w_t = weight.to(cdt).t();
    const int64_t N = hidden.size(0);
    torch::Tensor sum;
    for (int64_t i = 0; i < N; i += rows) {
      const int64_t n = std::min(rows, N - i);
      auto z = chunk_logits(hidden.narrow(0, i, n), w_t, cdt);
      const auto c = chunk_targets(targets.narrow(0, i, n), z);
      auto part = ((at::logsumexp(z, {1}) - z.gather(1, c.safe_targets.unsqueeze(1)).squeeze(1)) *
                   c.valid).sum();
      sum = sum.defined() ? sum + part : part;
    }
    const auto counted = (targets >= 0).sum();
    ctx->save_for_backward({hidden, weight, targets, counted});
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["cdt"] = static_cast<int64_t>(cdt);
    ctx->saved_data["half"] = half_emulation_enabled();
    return sum / counted.to(sum.scalar_type());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &weight = saved[1], &targets = saved[2];
    const bool want_h = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    if (!want_h && !want_w) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const auto cdt = static_cast<at::ScalarType>(ctx->saved_data["cdt"].toInt());
    const int64_t N = hidden.size(0), rows = ctx->saved_data["rows"].toInt();
    torch::NoGradGuard no_grad;
    NoAutocastGuard no_autocast;
    HalfEmulationGuard half(ctx->saved_data["half"].toBool());
    const auto w = weight.to(cdt);
    torch::Tensor dh = want_h ? torch::empty_like(hidden) : torch::Tensor(), dw;
    for (int64_t i = 0; i < N; i += rows) {
      const int64_t n = std::min(rows, N - i);
      const auto h = hidden.narrow(0, i, n);
      auto p = chunk_logits(h, w.t(), cdt);
      const auto c = chunk_targets(targets.narrow(0, i, n), p);
      const auto scale = grads[0].to(p.scalar_type()) / saved[3].to(p.scalar_type());
      p.sub_(at::logsumexp(p, {1}, /*keepdim=*/true)).exp_();          // softmax
      p.scatter_add_(1, c.safe_targets.unsqueeze(1), -torch::ones({n, 1}, p.options()));
      p.mul_((c.valid * scale).unsqueeze(1));                           // d loss / d logits
      const auto pc = p.to(cdt);
      if (want_h) dh.narrow(0, i, n).copy_(model::matmul(pc, w));
      if (want_w) {
        auto part = model::matmul(pc.t(), h.to(cdt));
        dw = dw.defined() ? dw + part : part;
      }
    }
    return {dh, want_w ? dw.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && targets.dim() == 1 &&
                  hidden.size(0) == targets.size(0) && hidden.size(1) == weight.size(1),
              "chunked_linear_cross_entropy: hidden [N, D], weight [V, D], targets [N]");
  const int64_t rows = chunk_rows > 0 ? chunk_rows : loss_chunk_rows(weight.size(0));
  return ChunkedCrossEntropyFn::apply(hidden, weight, targets, rows);
}

}  // namespace hlp::model
