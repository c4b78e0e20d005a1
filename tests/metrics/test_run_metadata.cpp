// The small pure helpers behind the result file's /summary and time stamps.
#include "catch_compat.h"

#include <cmath>
#include <limits>

#include "metrics/run_metadata.h"

using hlp::metrics::median_ignoring_nan;

TEST_CASE("metrics summary: the median ignores NaN and averages the middle pair", "[summary]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(median_ignoring_nan({3, nan, 1, 2}) == 2.0);
  CHECK(median_ignoring_nan({4, 1, 3, 2}) == 2.5);
  CHECK(median_ignoring_nan({7}) == 7.0);
  CHECK(median_ignoring_nan({10, 1, 1, 1, 50}) == 1.0);
  CHECK(std::isnan(median_ignoring_nan({})));
  CHECK(std::isnan(median_ignoring_nan({nan, nan})));
}

TEST_CASE("metrics summary: time stamps are ISO-8601 UTC", "[summary]") {
  const std::string t = hlp::metrics::utc_now_iso8601();
  REQUIRE(t.size() == 20);
  CHECK(t[4] == '-');
  CHECK(t[10] == 'T');
  CHECK(t[19] == 'Z');
}
