#include "model/gdn_core.h"

#include <limits>
#include <vector>

namespace hlp::model {

namespace {

torch::Tensor zero_state_like(const torch::Tensor& k, const torch::Tensor& v) {
  // [B, H, dk, dv]
  return torch::zeros({k.size(0), k.size(2), k.size(3), v.size(3)}, v.options());
}

}  // namespace

GdnResult gated_delta_rule_recurrent(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& beta,
                                     const torch::Tensor& g, const torch::Tensor& initial_state) {
  const int64_t T = q.size(1);
  auto S = initial_state.defined() ? initial_state : zero_state_like(k, v);  // [B, H, dk, dv]
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    auto q_t = q.select(1, t);        // [B, H, dk]
    auto k_t = k.select(1, t);        // [B, H, dk]
    auto v_t = v.select(1, t);        // [B, H, dv]
    auto beta_t = beta.select(1, t);  // [B, H]
    auto g_t = g.select(1, t);        // [B, H]
    S = S * g_t.exp().unsqueeze(-1).unsqueeze(-1);
    auto predicted = torch::matmul(k_t.unsqueeze(-2), S).squeeze(-2);  // S^T k: [B, H, dv]
    auto u = beta_t.unsqueeze(-1) * (v_t - predicted);                 // [B, H, dv]
    S = S + k_t.unsqueeze(-1) * u.unsqueeze(-2);                       // + k u^T
    outputs.push_back(torch::matmul(q_t.unsqueeze(-2), S).squeeze(-2));  // S^T q: [B, H, dv]
  }
  return {torch::stack(outputs, 1), S};
}

torch::Tensor to_chunks(const torch::Tensor& x, const ChunkTerms& t) {
  const int64_t C = (t.T + t.pad) / t.chunks;
  auto y = x.transpose(1, 2);  // [B, H, T, d]
  if (t.pad > 0) y = torch::constant_pad_nd(y, {0, 0, 0, t.pad});
  return y.reshape({x.size(0), x.size(2), t.chunks, C, x.size(3)});
}

torch::Tensor from_chunks(const torch::Tensor& x, const ChunkTerms& t) {
  // [B, H, N, C, d] -> [B, H, T, d] -> [B, T, H, d]
  auto o = x.reshape({x.size(0), x.size(1), t.T + t.pad, x.size(4)});
  if (t.pad > 0) o = o.narrow(2, 0, t.T);
  return o.transpose(1, 2);
}

ChunkTerms chunk_terms(const torch::Tensor& q_in, const torch::Tensor& k_in,
                       const torch::Tensor& v_in, const torch::Tensor& beta_in,
                       const torch::Tensor& g_in, int64_t chunk_size) {
  TORCH_CHECK(chunk_size > 0, "chunk size must be > 0");
  ChunkTerms t;
  const int64_t B = q_in.size(0), H = q_in.size(2), C = chunk_size;
  t.T = q_in.size(1);
  t.pad = (C - t.T % C) % C;
  t.chunks = (t.T + t.pad) / C;
  const int64_t N = t.chunks;
  // padding has q = k = v = beta = g = 0, which leaves the state unchanged
  auto gates_to_chunks = [&](const torch::Tensor& x) {  // [B, T, H] -> [B, H, N, C]
    auto y = x.transpose(1, 2);
    if (t.pad > 0) y = torch::constant_pad_nd(y, {0, t.pad});
    return y.reshape({B, H, N, C});
  };
  auto q = to_chunks(q_in, t), k = to_chunks(k_in, t), v = to_chunks(v_in, t);
  auto beta = gates_to_chunks(beta_in), g = gates_to_chunks(g_in);

  // 1. gamma = cumulative log decay inside each chunk: [B, H, N, C]
  auto gamma = g.cumsum(-1);
  // 2. D_ij = exp(gamma_i - gamma_j) for i >= j, else 0; mask before exp (no overflow, no NaN).
  auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(q.device());
  auto lower_incl = torch::ones({C, C}, bool_opts).tril();      // j <= i
  auto lower_strict = torch::ones({C, C}, bool_opts).tril(-1);  // j < i
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto D = (gamma.unsqueeze(-1) - gamma.unsqueeze(-2))
               .masked_fill(lower_incl.logical_not(), neg_inf)
               .exp();  // [B, H, N, C, C]
  // 3. A = strictly-lower part of (diag(beta) K K^T) * D
  auto kk = torch::matmul(k, k.transpose(-1, -2));  // [B, H, N, C, C]
  auto A = (beta.unsqueeze(-1) * kk * D).masked_fill(lower_strict.logical_not(), 0.0);
  // 4. (I + A) W = diag(beta * Gamma) K;  (I + A) U = diag(beta) V
  auto I_plus_A = A + torch::eye(C, q.options());
  t.W = at::linalg_solve_triangular(I_plus_A, (beta * gamma.exp()).unsqueeze(-1) * k,
                                    /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  t.U = at::linalg_solve_triangular(I_plus_A, beta.unsqueeze(-1) * v,
                                    /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  // Per-chunk pieces of step 5, also batched.
  t.q_decayed = q * gamma.exp().unsqueeze(-1);               // Q * Gamma   [.., C, dk]
  t.qk_decayed = torch::matmul(q, k.transpose(-1, -2)) * D;  // (Q K^T) * D [.., C, C]
  auto gamma_last = gamma.select(-1, C - 1);                 // [B, H, N]
  t.k_to_end = k * (gamma_last.unsqueeze(-1) - gamma).exp().unsqueeze(-1);  // [.., C, dk]
  t.decay = gamma_last.exp().unsqueeze(-1).unsqueeze(-1);    // [B, H, N, 1, 1]
  return t;
}

GdnResult gated_delta_rule_chunked(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& beta,
                                   const torch::Tensor& g, const torch::Tensor& initial_state,
                                   int64_t chunk_size) {
  const auto t = chunk_terms(q, k, v, beta, g, chunk_size);
  // 5. Sequential over chunks: V' = U - W S;  O = (Q*Gamma) S + ((Q K^T)*D) V';
  //    S <- exp(gamma_C) S + (K * exp(gamma_C - gamma))^T V'.
  auto S = initial_state.defined() ? initial_state : zero_state_like(k, v);  // [B,H,dk,dv]
  auto W_n = t.W.unbind(2), U_n = t.U.unbind(2), qd_n = t.q_decayed.unbind(2);
  auto qk_n = t.qk_decayed.unbind(2), kend_n = t.k_to_end.unbind(2), decay_n = t.decay.unbind(2);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(t.chunks));
  for (int64_t n = 0; n < t.chunks; ++n) {
    auto v_new = U_n[n] - torch::matmul(W_n[n], S);                                  // [B,H,C,dv]
    outputs.push_back(torch::matmul(qd_n[n], S) + torch::matmul(qk_n[n], v_new));    // [B,H,C,dv]
    S = decay_n[n] * S + torch::matmul(kend_n[n].transpose(-1, -2), v_new);          // [B,H,dk,dv]
  }
  return {from_chunks(torch::stack(outputs, 2), t), S};
}

}  // namespace hlp::model
