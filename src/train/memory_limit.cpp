#include "train/memory_limit.h"


#include <algorithm>
#include <fstream>
#include <string>

namespace hlp::train {
namespace {

// A number from a cgroup file; -1 for "max", a missing file or a v1 "no limit" (>= 2^60).
int64_t read_cgroup_value(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    const long long v = std::stoll(text);
    return v >= (1LL << 60) ? -1 : static_cast<int64_t>(v);
  } catch (...) {
    return -1;
  }
}

}  // namespace

int64_t HostMemory::usable_bytes() const {
  if (available_bytes < 0) return cgroup_free_bytes;
  if (cgroup_free_bytes < 0) return available_bytes;
  return std::min(available_bytes, cgroup_free_bytes);
}

std::string HostMemory::source() const {
  const bool cgroup = cgroup_free_bytes >= 0 &&
                      (available_bytes < 0 || cgroup_free_bytes < available_bytes);
  const int64_t mib = usable_bytes() >> 20;
  return cgroup ? "cgroup memory limit: " + std::to_string(mib) + " MiB free"
                : "MemAvailable " + std::to_string(mib) + " MiB";
}

HostMemory host_memory() {
  HostMemory m;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      m.available_bytes = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
  // cgroup v2 (this process's own group), else v1
  std::ifstream self("/proc/self/cgroup");
  std::string line, group_v2, group_v1;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) group_v2 = line.substr(3);
    const size_t at = line.find(":memory:");
    if (at != std::string::npos) group_v1 = line.substr(at + 8);
  }
  auto dir = [](const std::string& root, const std::string& group) {
    return root + (group == "/" ? std::string() : group);
  };
  const std::string v2 = dir("/sys/fs/cgroup", group_v2);
  int64_t limit = read_cgroup_value(v2 + "/memory.max");
  int64_t usage = read_cgroup_value(v2 + "/memory.current");
  if (limit < 0 && !group_v1.empty()) {
    const std::string v1 = dir("/sys/fs/cgroup/memory", group_v1);
    limit = read_cgroup_value(v1 + "/memory.limit_in_bytes");
    usage = read_cgroup_value(v1 + "/memory.usage_in_bytes");
  }
  if (limit >= 0) m.cgroup_free_bytes = std::max<int64_t>(0, limit - std::max<int64_t>(0, usage));
  return m;
}

}  // namespace hlp::train
