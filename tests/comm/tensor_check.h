#pragma once
// Helpers for comparing communicator results with values every rank computes locally.
// Rank r's contribution at flat index i is contribution(r, i): small integers, so sums over
// up to 4 ranks are exact in every dtype including bfloat16, and the expected result of any
// collective can be computed on every rank without communication.
#include <ATen/ATen.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"

inline double contribution(int rank, int64_t i) {
  return static_cast<double>((i * 7 + rank * 3 + 1) % 23) - 11.0;
}

inline const std::vector<c10::ScalarType>& all_dtypes() {
  static const std::vector<c10::ScalarType> dtypes{c10::ScalarType::Float,
                                                   c10::ScalarType::BFloat16,
                                                   c10::ScalarType::Double,
                                                   c10::ScalarType::Long};
  return dtypes;
}

// A 1-D tensor of numel elements; non-contiguous (stride 2 view into a [numel, 2] base) when
// contiguous == false.
inline at::Tensor make_tensor(int64_t numel, c10::ScalarType dtype, bool contiguous) {
  at::TensorOptions options = at::TensorOptions().dtype(dtype);
  if (contiguous) return at::zeros({numel}, options);
  at::Tensor t = at::zeros({numel, 2}, options).select(1, 0);
  return t;
}

inline void fill(const at::Tensor& t, const std::vector<double>& values) {
  t.copy_(at::tensor(values, at::TensorOptions().dtype(at::kDouble)).view(t.sizes()));
}

inline std::vector<double> rank_values(int rank, int64_t numel) {
  std::vector<double> values(numel);
  for (int64_t i = 0; i < numel; ++i) values[i] = contribution(rank, i);
  return values;
}

// Expected reduction over ranks [0, n) at index i, rounded like the communicators do.
inline double reduce_expected(hlp::comm::ReduceOp op, int n, int64_t i, bool integral) {
  double acc = (op == hlp::comm::ReduceOp::Max) ? -1e300 : 0.0;
  for (int r = 0; r < n; ++r) {
    double v = contribution(r, i);
    acc = (op == hlp::comm::ReduceOp::Max) ? std::max(acc, v) : acc + v;
  }
  if (op == hlp::comm::ReduceOp::Avg) acc = integral ? std::trunc(acc / n) : acc / n;
  return acc;
}

// Exact comparison after rounding the expected values to t's dtype. Returns "" on success,
// else a description of the first mismatch.
inline std::string mismatch(const at::Tensor& t, const std::vector<double>& expected) {
  std::ostringstream os;
  if (t.numel() != static_cast<int64_t>(expected.size())) {
    os << "numel " << t.numel() << " != expected " << expected.size();
    return os.str();
  }
  at::Tensor want = at::tensor(expected, at::TensorOptions().dtype(at::kDouble))
                        .to(t.scalar_type())
                        .to(at::kDouble);
  at::Tensor got = t.reshape({-1}).to(at::kDouble);
  if (at::equal(got, want)) return "";
  at::Tensor diff = (got != want).nonzero();
  int64_t i = diff[0][0].item<int64_t>();
  os << "first mismatch at " << i << ": got " << got[i].item<double>() << ", want "
     << want[i].item<double>() << " (" << diff.size(0) << " mismatches of " << t.numel() << ")";
  return os.str();
}

inline std::string describe(c10::ScalarType dtype, int64_t numel, bool contiguous, bool async) {
  std::ostringstream os;
  os << c10::toString(dtype) << " numel=" << numel << (contiguous ? " contiguous" : " strided")
     << (async ? " async" : " sync");
  return os.str();
}
