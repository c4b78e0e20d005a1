#pragma once
// The parity criterion every strategy test uses: a loss trajectory equals the reference's
// within 1e-5 relative, step by step (float32, same seed and global batch).
#include "catch_compat.h"

#include <cmath>
#include <vector>

namespace hlp::test {

constexpr double kParityRelTol = 1e-5;

inline void check_parity(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i << ": got " << got[i] << " want " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= kParityRelTol * std::abs(want[i]));
  }
}

}  // namespace hlp::test
