#include "metrics/run_metadata.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>

#include "common/error.h"

namespace hlp::metrics {

void bcast_string(std::string& s, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  s.resize(static_cast<size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
}

std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(std::max(len, 0)));
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// Every rank's host name, in rank order, comma separated.
std::string gather_hosts(MPI_Comm comm, int world) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(world) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, comm);
  std::string hosts;
  for (int r = 0; r < world; ++r) {
    if (r) hosts += ",";
    hosts += std::string(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  return hosts;
}

std::vector<double> gather_double(MPI_Comm comm, int world, double local) {
  std::vector<double> all(static_cast<size_t>(world));
  MPI_Allgather(&local, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm);
  return all;
}

// Every rank throws the same UserError if any rank hit a problem (no rank left waiting).
void agree_or_throw(MPI_Comm comm, const std::string& local_problem) {
  int bad = local_problem.empty() ? 0 : 1;
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
  if (!any) return;
  if (bad) throw UserError(local_problem);
  throw user_error("result writer: another rank reported an error (see its message)");
}

double median_ignoring_nan(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

}  // namespace hlp::metrics
