#include "op_profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <map>
#include <set>

namespace hlp::bench {

OpProfile profile_ops(const std::function<void()>& work) {
  namespace prof = torch::autograd::profiler;
  prof::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  work();
  const auto lists = prof::disableProfilerLegacy();

  std::map<std::string, OpTime> by_name;
  for (const auto& events : lists) {
    struct Open {
      const prof::LegacyEvent* start;
      double child_us;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kind() == prof::EventKind::PushRange) {
        stack.push_back({&e, 0.0});
      } else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double total_us = open.start->cpuElapsedUs(e);
        // backward nodes of custom Functions: "torch::autograd::CppNode<ns::(anonymous
        // namespace)::RmsNormFn>" -> "backward: RmsNormFn"
        std::string name = open.start->name();
        if (name.rfind("torch::autograd::CppNode<", 0) == 0) {
          const auto colon = name.rfind("::");
          name = "backward: " + name.substr(colon + 2, name.size() - colon - 3);
        }
        auto& op = by_name[name];
        op.name = name;
        op.self_ms += (total_us - open.child_us) / 1e3;
        op.calls += 1;
        if (!stack.empty()) stack.back().child_us += total_us;
      }
    }
  }
  static const std::set<std::string> matmul = {
      "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::dot",
      "aten::mv", "aten::linalg_solve_triangular"};
  OpProfile profile;
  double matmul_ms = 0;
  for (auto& [name, op] : by_name) {
    profile.total_ms += op.self_ms;
    if (matmul.count(name)) matmul_ms += op.self_ms;
    profile.ops.push_back(op);
  }
  std::sort(profile.ops.begin(), profile.ops.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  profile.matmul_share = profile.total_ms > 0 ? matmul_ms / profile.total_ms : 0;
  return profile;
}

}  // namespace hlp::bench
