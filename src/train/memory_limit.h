#pragma once
// How much more memory this rank may allocate: what `hlp-train` compares its predicted peak with
// before the first step (it refuses a run that cannot fit; --allow-overcommit runs it anyway).
//   CPU:  min(the cgroup's limit minus its usage, MemAvailable) shared by the ranks on this node.
//   CUDA: the device's total memory minus what this rank holds on it now.
#include <cstdint>
#include <string>

namespace hlp::train {

struct HostMemory {
  int64_t available_bytes = -1;  // MemAvailable (/proc/meminfo), -1 when unknown
  int64_t cgroup_free_bytes = -1;  // memory.max - memory.current (v2) or the v1 pair; -1 none
  // The smaller of the two known ones, -1 when neither is known.
  int64_t usable_bytes() const;
  // "MemAvailable 23747 MiB" or "cgroup limit: 4096 MiB free"
  std::string source() const;
};

HostMemory host_memory();

}  // namespace hlp::train
