// The chunked gated delta rule (docs/model-math.md, "The chunked form") as one task per
// (batch, head), chunk after chunk, with every per-chunk product a direct BLAS call on strided
// rows of q, k, v (no padding, no [B, H, N, C, C] intermediates). Per chunk of L <= C rows
// (Q, K [L, dk], V [L, dv]):
//   gamma = cumsum(g);  E = exp(gamma);  Dm_ij = exp(gamma_i - gamma_j) (j <= i, else 0)
//   A = strict_lower(diag(beta) K K^T * Dm);  Tinv = (I + A)^-1   (UT transform, row recursion)
//   W = Tinv diag(beta E) K;  U = Tinv diag(beta) V
//   V' = U - W S;  O = diag(E) Q S + ((Q K^T) * Dm) V'
//   S <- e_L S + (diag(f) K)^T V',  e_L = E[L-1], f_i = exp(gamma_L - gamma_i)
// Backward, chunks in reverse with dS = gradient of the state leaving the chunk:
//   dQg = dO S^T;  dP = dO V'^T;  dV' = P^T dO + Kd dS;  dKd = V' dS^T;  de_L = <S, dS>
//   dW = -dV' S^T;  dVb = Tinv^T dV';  dKb = Tinv^T dW;  dA = -(dVb U^T + dKb W^T) (strict lower)
//   dS_prev = e_L dS + Qg^T dO - W^T dV'
//   then the element-wise chain through Dm, beta, E, f to dgamma and dg = reverse cumsum(dgamma).
// What backward needs of S: the state entering each chunk, saved by the forward
// (save_states) or recomputed by a state-only sweep (see fused_ops.h for the measured choice).
#include <ATen/Parallel.h>

#include <vector>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/small_gemm.h"
#include "model/kernels/vec_ops.h"

namespace hlp::model::kernels {

namespace {

// Strided views of one (batch, head) of the [B, T, H, d] inputs.
template <typename T>
struct HeadView {
  const T *q, *k, *v, *beta, *g;
  int64_t ld_k, ld_v, ld_gate;  // row strides: H * dk, H * dv, H
};

// Everything of one chunk that does not depend on the state, plus buffers for the rest.
template <typename T>
struct ChunkWork {
  int64_t C, dk, dv;
  std::vector<T> gam, E, f, KK, Dm, Tinv, Kb, Vb, W, U, Vn, QK, P, Qg, Kd, row;
  ChunkWork(int64_t C_, int64_t dk_, int64_t dv_) : C(C_), dk(dk_), dv(dv_) {
    auto n = [](int64_t x) { return static_cast<size_t>(x); };
    gam.resize(n(C)), E.resize(n(C)), f.resize(n(C)), row.resize(n(C));
    for (auto* m : {&KK, &Dm, &Tinv, &QK, &P}) m->resize(n(C * C));
    for (auto* m : {&Kb, &W, &Qg, &Kd}) m->resize(n(C * dk));
    for (auto* m : {&Vb, &U, &Vn}) m->resize(n(C * dv));
  }

  // Rows [t0, t0 + L) of the head. With output_terms, also Qg, QK and P (forward output and
  // backward); without, only what the state hand-over needs (W, U, Kd, e_L).
  void prepare(const HeadView<T>& h, int64_t t0, int64_t L, bool output_terms) {
    const T* Q = h.q + t0 * h.ld_k;
    const T* K = h.k + t0 * h.ld_k;
    const T* V = h.v + t0 * h.ld_v;
    T acc = 0;
    for (int64_t i = 0; i < L; ++i) {
      acc += h.g[(t0 + i) * h.ld_gate];
      gam[i] = acc;
      E[i] = std::exp(acc);
    }
    for (int64_t i = 0; i < L; ++i) f[i] = std::exp(gam[L - 1] - gam[i]);
    // Dm: lower triangle incl. the diagonal, zero above
    for (int64_t i = 0; i < L; ++i) {
      T* d = Dm.data() + i * L;
      exp_of_difference(d, gam[i], gam.data(), i + 1);
      for (int64_t j = i + 1; j < L; ++j) d[j] = T(0);
    }
    gemm_rm(false, true, L, L, dk, T(1), K, h.ld_k, K, h.ld_k, T(0), KK.data(), L);
    // Tinv row i = e_i - sum_{m<i} A_im Tinv_m, A_im = beta_i KK_im Dm_im
    for (int64_t i = 0; i < L; ++i) {
      T* ti = Tinv.data() + i * L;
      for (int64_t j = 0; j < L; ++j) ti[j] = T(0);
      ti[i] = T(1);
      const T beta_i = h.beta[(t0 + i) * h.ld_gate];
      for (int64_t m = 0; m < i; ++m) {
        const T a = beta_i * KK[i * L + m] * Dm[i * L + m];
        if (a != T(0)) axpy(ti, -a, Tinv.data() + m * L, m + 1);
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      const T beta_i = h.beta[(t0 + i) * h.ld_gate];
      scale_to(Kb.data() + i * dk, beta_i * E[i], K + i * h.ld_k, dk);
      scale_to(Vb.data() + i * dv, beta_i, V + i * h.ld_v, dv);
      scale_to(Kd.data() + i * dk, f[i], K + i * h.ld_k, dk);
    }
    gemm_rm(false, false, L, dk, L, T(1), Tinv.data(), L, Kb.data(), dk, T(0), W.data(), dk);
    gemm_rm(false, false, L, dv, L, T(1), Tinv.data(), L, Vb.data(), dv, T(0), U.data(), dv);
    if (!output_terms) return;
    for (int64_t i = 0; i < L; ++i) scale_to(Qg.data() + i * dk, E[i], Q + i * h.ld_k, dk);
    gemm_rm(false, true, L, L, dk, T(1), Q, h.ld_k, K, h.ld_k, T(0), QK.data(), L);
    for (int64_t i = 0; i < L * L; ++i) P[i] = QK[i] * Dm[i];
  }

  // V' = U - W S
  void new_values(int64_t L, const T* S) {
    std::copy(U.begin(), U.begin() + L * dv, Vn.begin());
    gemm_rm(false, false, L, dv, dk, T(-1), W.data(), dk, S, dv, T(1), Vn.data(), dv);
  }

  // S <- e_L S + Kd^T V'
  void advance_state(int64_t L, T* S) {
    const T e_L = E[L - 1];
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= e_L;
    gemm_rm(true, false, dk, dv, L, T(1), Kd.data(), dk, Vn.data(), dv, T(1), S, dv);
  }
};

template <typename T>
HeadView<T> head_view(const T* q, const T* k, const T* v, const T* beta, const T* g, int64_t b,
                      int64_t h, int64_t T_, int64_t H, int64_t dk, int64_t dv) {
  const int64_t row0 = b * T_ * H + h;
  return {q + row0 * dk, k + row0 * dk, v + row0 * dv, beta + row0, g + row0,
          H * dk, H * dv, H};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> gdn_chunked_forward(
    const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& beta_in, const at::Tensor& g_in, const at::Tensor& S0_in, int64_t C,
    bool save_states) {
  TORCH_CHECK(C > 0, "chunk size must be > 0");
  const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const auto beta = beta_in.contiguous(), g = g_in.contiguous();
  const int64_t B = q.size(0), T_ = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  const int64_t N = (T_ + C - 1) / C;
  auto out = at::empty({B, T_, H, dv}, v.options());
  auto S_final = S0_in.defined() ? S0_in.contiguous().clone() : at::zeros({B, H, dk, dv}, v.options());
  auto states = save_states ? at::empty({B, H, N, dk, dv}, v.options()) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "gdn_chunked_forward", [&] {
    using T = scalar_t;
    const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
    const T *bp = beta.data_ptr<T>(), *gp = g.data_ptr<T>();
    T* op = out.data_ptr<T>();
    T* Sp = S_final.data_ptr<T>();
    T* statep = save_states ? states.data_ptr<T>() : nullptr;
    at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
      ChunkWork<T> w(C, dk, dv);
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        const auto view = head_view(qp, kp, vp, bp, gp, b, h, T_, H, dk, dv);
        T* S = Sp + bh * dk * dv;
        T* O = op + (b * T_ * H + h) * dv;
        for (int64_t n = 0; n < N; ++n) {
          const int64_t t0 = n * C, L = std::min(C, T_ - t0);
          if (statep) std::copy(S, S + dk * dv, statep + (bh * N + n) * dk * dv);
          w.prepare(view, t0, L, /*output_terms=*/true);
          w.new_values(L, S);
          T* On = O + t0 * H * dv;
          gemm_rm(false, false, L, dv, dk, T(1), w.Qg.data(), dk, S, dv, T(0), On, H * dv);
          gemm_rm(false, false, L, dv, L, T(1), w.P.data(), L, w.Vn.data(), dv, T(1), On, H * dv);
          w.advance_state(L, S);
        }
      }
    });
  });
  return {out, S_final, states};
}

GdnGrads gdn_chunked_backward(const at::Tensor& dO_in, const at::Tensor& dS_final_in,
                              const at::Tensor& q_in, const at::Tensor& k_in,
                              const at::Tensor& v_in, const at::Tensor& beta_in,
                              const at::Tensor& g_in, const at::Tensor& S0_in,
                              const at::Tensor& states_in, int64_t C) {
  const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const auto beta = beta_in.contiguous(), g = g_in.contiguous();
  const auto dO = dO_in.defined() ? dO_in.contiguous() : at::zeros_like(v);
  const int64_t B = q.size(0), T_ = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  const int64_t N = (T_ + C - 1) / C;
  const auto S0 = S0_in.defined() ? S0_in.contiguous() : at::zeros({B, H, dk, dv}, v.options());
  const auto states = states_in.defined() ? states_in.contiguous() : at::Tensor();
  // dS: the gradient of the state leaving the current chunk; ends as d initial_state
  auto dS_all = dS_final_in.defined() ? dS_final_in.contiguous().clone()
                                      : at::zeros({B, H, dk, dv}, v.options());
  GdnGrads grads;
  grads.q = at::empty_like(q), grads.k = at::empty_like(k), grads.v = at::empty_like(v);
  grads.beta = at::empty_like(beta), grads.g = at::empty_like(g);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "gdn_chunked_backward", [&] {
    using T = scalar_t;
    const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
    const T *bp = beta.data_ptr<T>(), *gp = g.data_ptr<T>();
    const T* dOp = dO.data_ptr<T>();
    const T* S0p = S0.data_ptr<T>();
    const T* statep = states.defined() ? states.data_ptr<T>() : nullptr;
    T* dSp = dS_all.data_ptr<T>();
    T *dqp = grads.q.data_ptr<T>(), *dkp = grads.k.data_ptr<T>(), *dvp = grads.v.data_ptr<T>();
    T *dbp = grads.beta.data_ptr<T>(), *dgp = grads.g.data_ptr<T>();
    at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
      ChunkWork<T> w(C, dk, dv);
      auto buf = [](int64_t n) { return std::vector<T>(static_cast<size_t>(n)); };
      auto dQg = buf(C * dk), dKd = buf(C * dk), dW = buf(C * dk), dKb = buf(C * dk);
      auto dQ = buf(C * dk), dK = buf(C * dk);
      auto dP = buf(C * C), dA = buf(C * C), dQK = buf(C * C), Msym = buf(C * C);
      auto dVn = buf(C * dv), dVb = buf(C * dv);
      auto dgam = buf(C), dbeta = buf(C);
      std::vector<T> recomputed;  // states entering each chunk when the forward kept none
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        const auto view = head_view(qp, kp, vp, bp, gp, b, h, T_, H, dk, dv);
        const T* chunk_states = statep ? statep + bh * N * dk * dv : nullptr;
        if (!chunk_states) {
          recomputed.resize(static_cast<size_t>(N * dk * dv));
          std::copy(S0p + bh * dk * dv, S0p + (bh + 1) * dk * dv, recomputed.begin());
          for (int64_t n = 0; n + 1 < N; ++n) {
            const int64_t t0 = n * C, L = std::min(C, T_ - t0);
            T* S_next = recomputed.data() + (n + 1) * dk * dv;
            std::copy(S_next - dk * dv, S_next, S_next);
            w.prepare(view, t0, L, /*output_terms=*/false);
            w.new_values(L, S_next - dk * dv);
            w.advance_state(L, S_next);
          }
          chunk_states = recomputed.data();
        }
        T* dS = dSp + bh * dk * dv;
        const int64_t row0 = b * T_ * H + h;
        for (int64_t n = N - 1; n >= 0; --n) {
          const int64_t t0 = n * C, L = std::min(C, T_ - t0);
          const T* S = chunk_states + n * dk * dv;
          const T* Q = view.q + t0 * view.ld_k;
          const T* K = view.k + t0 * view.ld_k;
          const T* V = view.v + t0 * view.ld_v;
          const T* dOn = dOp + (row0 + t0 * H) * dv;
          const int64_t ld_o = H * dv;
          w.prepare(view, t0, L, /*output_terms=*/true);
          w.new_values(L, S);
          const T e_L = w.E[L - 1];
          // products with dO and dS (dS is still the gradient of the state leaving the chunk)
          gemm_rm(false, true, L, dk, dv, T(1), dOn, ld_o, S, dv, T(0), dQg.data(), dk);
          gemm_rm(false, true, L, L, dv, T(1), dOn, ld_o, w.Vn.data(), dv, T(0), dP.data(), L);
          gemm_rm(true, false, L, dv, L, T(1), w.P.data(), L, dOn, ld_o, T(0), dVn.data(), dv);
          gemm_rm(false, false, L, dv, dk, T(1), w.Kd.data(), dk, dS, dv, T(1), dVn.data(), dv);
          gemm_rm(false, true, L, dk, dv, T(1), w.Vn.data(), dv, dS, dv, T(0), dKd.data(), dk);
          const T d_eL = dot(S, static_cast<const T*>(dS), dk * dv);
          gemm_rm(false, true, L, dk, dv, T(-1), dVn.data(), dv, S, dv, T(0), dW.data(), dk);
          gemm_rm(true, false, L, dv, L, T(1), w.Tinv.data(), L, dVn.data(), dv, T(0), dVb.data(), dv);
          gemm_rm(true, false, L, dk, L, T(1), w.Tinv.data(), L, dW.data(), dk, T(0), dKb.data(), dk);
          gemm_rm(false, true, L, L, dv, T(-1), dVb.data(), dv, w.U.data(), dv, T(0), dA.data(), L);
          gemm_rm(false, true, L, L, dk, T(-1), dKb.data(), dk, w.W.data(), dk, T(1), dA.data(), L);
          // hand dS to the previous chunk: e_L dS + Qg^T dO - W^T dV'
          for (int64_t i = 0; i < dk * dv; ++i) dS[i] *= e_L;
          gemm_rm(true, false, dk, dv, L, T(1), w.Qg.data(), dk, dOn, ld_o, T(1), dS, dv);
          gemm_rm(true, false, dk, dv, L, T(-1), w.W.data(), dk, dVn.data(), dv, T(1), dS, dv);
          // element-wise over the L x L lower triangle
          for (int64_t i = 0; i < L; ++i) dgam[i] = T(0), dbeta[i] = T(0);
          for (int64_t i = 0; i < L; ++i) {
            const T beta_i = view.beta[(t0 + i) * view.ld_gate];
            for (int64_t j = 0; j < L; ++j) {
              const int64_t ij = i * L + j;
              const T Dm = w.Dm[ij];
              if (j > i) {
                dQK[ij] = T(0), Msym[ij] = T(0);
                continue;
              }
              dQK[ij] = dP[ij] * Dm;
              if (j == i) {
                Msym[ij] = T(0);
                continue;
              }
              const T dKK = dA[ij] * beta_i * Dm;
              Msym[ij] = dKK;
              dbeta[i] += dA[ij] * w.KK[ij] * Dm;
              const T dDm = dA[ij] * beta_i * w.KK[ij] + dP[ij] * w.QK[ij];
              dgam[i] += dDm * Dm;
              dgam[j] -= dDm * Dm;
            }
          }
          for (int64_t i = 0; i < L; ++i)  // symmetrise: Msym = dKK + dKK^T
            for (int64_t j = i + 1; j < L; ++j) Msym[i * L + j] = Msym[j * L + i];
          gemm_rm(false, false, L, dk, L, T(1), Msym.data(), L, K, view.ld_k, T(0), dK.data(), dk);
          gemm_rm(true, false, L, dk, L, T(1), dQK.data(), L, Q, view.ld_k, T(1), dK.data(), dk);
          gemm_rm(false, false, L, dk, L, T(1), dQK.data(), L, K, view.ld_k, T(0), dQ.data(), dk);
          // row-wise terms through E, beta, f
          T dgam_last = d_eL * e_L;
          for (int64_t i = 0; i < L; ++i) {
            const T beta_i = view.beta[(t0 + i) * view.ld_gate];
            const T* Qi = Q + i * view.ld_k;
            const T* Ki = K + i * view.ld_k;
            const T* Vi = V + i * view.ld_v;
            const T E_i = w.E[i], f_i = w.f[i];
            const T kb = dot(Ki, dKb.data() + i * dk, dk);
            const T dE = dot(Qi, dQg.data() + i * dk, dk) + beta_i * kb;
            dbeta[i] += E_i * kb + dot(Vi, dVb.data() + i * dv, dv);
            const T df = dot(Ki, dKd.data() + i * dk, dk);
            dgam_last += df * f_i;
            dgam[i] += dE * E_i - df * f_i;
            T* dQi = dqp + (row0 + (t0 + i) * H) * dk;
            T* dKi = dkp + (row0 + (t0 + i) * H) * dk;
            T* dVi = dvp + (row0 + (t0 + i) * H) * dv;
            std::copy(dQ.begin() + i * dk, dQ.begin() + (i + 1) * dk, dQi);
            axpy(dQi, E_i, dQg.data() + i * dk, dk);
            std::copy(dK.begin() + i * dk, dK.begin() + (i + 1) * dk, dKi);
            axpy(dKi, beta_i * E_i, dKb.data() + i * dk, dk);
            axpy(dKi, f_i, dKd.data() + i * dk, dk);
            scale_to(dVi, beta_i, dVb.data() + i * dv, dv);
            dbp[row0 + (t0 + i) * H] = dbeta[i];
          }
          dgam[L - 1] += dgam_last;
          T suffix = 0;  // dg_i = sum_{m >= i} dgamma_m
          for (int64_t i = L - 1; i >= 0; --i) {
            suffix += dgam[i];
            dgp[row0 + (t0 + i) * H] = suffix;
          }
        }
      }
    });
  });
  grads.initial_state = S0_in.defined() ? dS_all : at::Tensor();
  return grads;
}

}  // namespace hlp::model::kernels
