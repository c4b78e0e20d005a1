#pragma once
// One clock for the whole process: seconds on std::chrono::steady_clock since an arbitrary epoch.
// Communicator records, recorder events and step timers all use it so that they line up.
#include <chrono>
#include <ctime>

namespace hlp {
inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// CPU seconds consumed by the calling thread (CLOCK_THREAD_CPUTIME_ID). Unlike now_s() it does
// not advance while the thread waits or is descheduled, so on an oversubscribed CPU it still
// measures the work done (all of it with --threads 1, where the compute runs on this thread).
inline double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU seconds consumed by the whole process so far (every thread, CLOCK_PROCESS_CPUTIME_ID).
inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
}  // namespace hlp
