#include "metrics/device_peak.h"

#include <algorithm>
#include <cctype>

namespace hlp::metrics {
namespace {

struct Row {
  const char* label;      // "H100 SXM"
  const char* half_kind;  // "BF16" or "FP16" (V100)
  double half_tflops;     // dense 16-bit tensor peak
  double fp32_tflops;     // dense fp32 (non-tensor) peak
};

// Datasheet numbers: see device_peak.h for the sources.
std::optional<Row> find_row(const std::string& device_name) {
  std::string n = device_name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  // Order matters: the more specific names first.
  if (has("H100") && (has("PCIE") || has("PCI-E"))) return Row{"H100 PCIe", "BF16", 756, 51};
  if (has("H100") && has("NVL")) return Row{"H100 NVL", "BF16", 835, 60};
  if (has("H100")) return Row{"H100 SXM", "BF16", 989, 67};
  if (has("H200") && has("NVL")) return Row{"H200 NVL", "BF16", 835, 60};
  if (has("H200")) return Row{"H200", "BF16", 989, 67};
  if (has("A100")) return Row{"A100", "BF16", 312, 19.5};
  if (has("L40S")) return Row{"L40S", "BF16", 362, 91.6};
  if (has("V100") && (has("PCIE") || has("PCI-E"))) return Row{"V100 PCIe", "FP16", 112, 14};
  if (has("V100")) return Row{"V100", "FP16", 125, 15.7};
  return std::nullopt;
}

std::string tflops_text(double t) {
  std::string s = std::to_string(t);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name,
                                         PeakPrecision precision) {
  const auto row = find_row(device_name);
  if (!row) return std::nullopt;
  if (precision == PeakPrecision::fp32)
    return DevicePeak{row->fp32_tflops * 1e12, std::string("table: ") + row->label +
                                                   " FP32 dense " + tflops_text(row->fp32_tflops) +
                                                   " TFLOP/s (vendor datasheet)"};
  const std::string kind = row->half_kind;
  return DevicePeak{row->half_tflops * 1e12,
                    std::string("table: ") + row->label + " " + kind +
                        (kind == "FP16" ? " tensor " : " dense ") +
                        tflops_text(row->half_tflops) + " TFLOP/s (vendor datasheet)"};
}

std::optional<DevicePeak> gpu_peak_flops(const std::string& device_name) {
  return gpu_peak_flops(device_name, PeakPrecision::half);
}

}  // namespace hlp::metrics
