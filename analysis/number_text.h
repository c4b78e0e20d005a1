#pragma once
// One number as text through a printf format ("%.1f"), for the report's tables and sentences.
#include <cmath>
#include <cstdio>
#include <string>

namespace hlp::analysis {

// NaN prints as printf prints it ("nan"); fmt_or gives `if_nan` for it instead.
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
inline std::string fmt_or(const char* format, double v, const char* if_nan) {
  return std::isnan(v) ? std::string(if_nan) : fmt(format, v);
}

}  // namespace hlp::analysis
