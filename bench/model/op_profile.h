#pragma once
// Per-op self time of a piece of work, from LibTorch's legacy autograd profiler (CPU): every
// recorded range (aten ops, autograd backward nodes, custom Functions) is charged its own time
// minus the time of the ranges nested inside it, summed by name over all threads.
#include <functional>
#include <string>
#include <vector>

namespace hlp::bench {

struct OpTime {
  std::string name;
  double self_ms = 0;
  int64_t calls = 0;
};

struct OpProfile {
  std::vector<OpTime> ops;  // by self time, largest first
  double total_ms = 0;      // sum of self times (= time inside any recorded range)
  // share of total_ms in dense matrix-product ops (aten::mm, addmm, bmm, baddbmm, addbmm,
  // dot, mv, linalg_solve_triangular); products inside fused kernels are not separable
  double matmul_share = 0;
};

OpProfile profile_ops(const std::function<void()>& work);

}  // namespace hlp::bench
