#pragma once
// One clock for the whole process: seconds on std::chrono::steady_clock since an arbitrary epoch.
// Communicator records, recorder events and step timers all use it so that they line up.
#include <chrono>

namespace hlp {
inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace hlp
