#include "metrics/device_peak.h"

#include <algorithm>
#include <cctype>

namespace hlp::metrics {

std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name) {
  std::string n = device_name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  // Order matters: the more specific names first.
  if (has("H100") && (has("PCIE") || has("PCI-E")))
    return DevicePeak{756e12, "table: H100 PCIe BF16 dense 756 TFLOP/s"};
  if (has("H100")) return DevicePeak{989e12, "table: H100 SXM BF16 dense 989 TFLOP/s"};
  if (has("H200")) return DevicePeak{989e12, "table: H200 BF16 dense 989 TFLOP/s"};
  if (has("A100")) return DevicePeak{312e12, "table: A100 BF16 dense 312 TFLOP/s"};
  if (has("V100")) return DevicePeak{125e12, "table: V100 FP16 tensor 125 TFLOP/s"};
  return std::nullopt;
}

}  // namespace hlp::metrics
