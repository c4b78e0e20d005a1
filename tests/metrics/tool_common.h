#pragma once
// Shared by the result-file test driver's parts (metrics_tool.cpp, tool_checks.cpp): the known
// values the writer writes and the checks expect, and a non-aborting EXPECT.
#include <cstdint>
#include <iostream>
#include <string>

#include "common/error.h"

namespace metrics_test {

extern int g_failures;  // EXPECT failures so far (each part returns it as its exit status)
#define EXPECT(...)                                                                     \
  do {                                                                                  \
    if (!(__VA_ARGS__)) {                                                               \
      ++g_failures;                                                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << ": EXPECT failed: " #__VA_ARGS__ "\n"; \
    }                                                                                   \
  } while (0)

inline constexpr const char* kConfig = "[run]\nstrategy = ddp\nsteps = 12\n\n[model]\npreset = tiny\n";
inline constexpr const char* kExtraMetric = "custom_widgets";

// The value every rank writes for metric index i at step s: distinct per (rank, step, metric).
inline double known_value(int rank, int64_t step, size_t metric_index) {
  return rank * 1000.0 + static_cast<double>(step) + static_cast<double>(metric_index) / 100.0;
}
inline int64_t allreduce_bytes(int rank, int64_t step) { return 1000 * (rank + 1) + step; }

template <typename F>
void expect_user_error(F&& f, const std::string& needle) {
  try {
    f();
    ++g_failures;
    std::cerr << "expected hlp::UserError containing '" << needle << "', nothing thrown\n";
  } catch (const hlp::UserError& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      ++g_failures;
      std::cerr << "UserError '" << e.what() << "' lacks '" << needle << "'\n";
    }
  }
}


// The checks (tool_checks.cpp). Each returns the number of failed expectations.
int check_file(const std::string& path, int world, int64_t steps, int complete);
int check_export(const std::string& path, const std::string& json_path, int world, int64_t steps);
int run_reject(const std::string& good, const std::string& dir);

}  // namespace metrics_test
