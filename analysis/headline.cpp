#include "analysis/headline.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <set>

#include "analysis/findings.h"
#include "analysis/number_text.h"
#include "metrics/schema.h"

namespace hlp::analysis {
namespace schema = metrics::schema;
namespace {

// Columns a `single` run may differ in from the parallel run it is the baseline of.
const std::set<std::string> kMeshColumns = {"strategy", "dp", "pp", "tp", "cp", "ep",
                                            "world_size", "micro_batches", "pp_split",
                                            "pp_schedule", "pp_virtual", "cp_layout",
                                            "cp_scheme", "cp_attention"};

// a headline cell: "–" where the value does not apply
std::string cell(const char* f, double v) { return fmt_or(f, v, "–"); }

HeadlineRow headline_of(const ConfigRow& r, const Group& g, const std::vector<ConfigRow>& rows) {
  HeadlineRow h;
  h.strategy = competitor_label(r, g);
  h.gpu = r.value("device") != "cpu";
  h.devices = r.world_size();
  h.context = r.config_int("seq_len");
  h.tokens_per_s_per_device = tokens_per_device(r);
  h.peak_gib_per_device = r.peak_bytes_max / (1024.0 * 1024.0 * 1024.0);
  h.mfu = r.median(schema::kMfuModel);
  const ConfigRow* single = matching_single(r, rows);
  h.scaling_efficiency = single ? r.median(schema::kTokensPerS) /
                                      (double(h.devices) * single->median(schema::kTokensPerS))
                                : std::nan("");
  h.comm_exposed = r.comm_exposed_fraction;
  h.bubble = r.config_int("pp") > 1 ? (std::isnan(r.bubble_fraction_trace) ? r.bubble_fraction
                                                                            : r.bubble_fraction_trace)
                                    : std::nan("");
  return h;
}

std::string devices_header(const std::vector<HeadlineRow>& rows) {
  bool gpu = false, cpu = false;
  for (const auto& r : rows) (r.gpu ? gpu : cpu) = true;
  return gpu && cpu ? "devices" : gpu ? "GPUs" : "ranks";
}


// The nine columns, formatted once for both writers.
std::vector<std::vector<std::string>> cells(const std::vector<HeadlineRow>& rows) {
  std::vector<std::vector<std::string>> out;
  for (const auto& r : rows)
    out.push_back({r.strategy, std::to_string(r.devices), std::to_string(r.context),
                   cell("%.0f", r.tokens_per_s_per_device), cell("%.3g", r.peak_gib_per_device),
                   cell("%.1f", 100 * r.mfu), cell("%.2f", r.scaling_efficiency),
                   cell("%.1f", 100 * r.comm_exposed), cell("%.1f", 100 * r.bubble)});
  return out;
}

std::vector<std::string> header(const std::vector<HeadlineRow>& rows) {
  return {"strategy", devices_header(rows), "context", "tok/s/device", "peak GiB/device",
          "MFU %", "scaling eff.", "exposed comm %", "bubble %"};
}

}  // namespace

const ConfigRow* matching_single(const ConfigRow& row, const std::vector<ConfigRow>& rows) {
  for (const auto& s : rows) {
    if (s.value("strategy") != "single" || s.world_size() != 1) continue;
    bool same = true;
    for (const auto& c : config_columns())
      same = same && (kMeshColumns.count(c) || s.value(c) == row.value(c));
    if (same) return &s;
  }
  return nullptr;
}

std::vector<HeadlineRow> headline_rows(const std::vector<ConfigRow>& rows) {
  std::vector<HeadlineRow> out;
  for (const auto& g : comparable_groups(rows)) {
    std::vector<HeadlineRow> group;
    for (const ConfigRow* r : g.rows) group.push_back(headline_of(*r, g, rows));
    std::stable_sort(group.begin(), group.end(), [](const HeadlineRow& a, const HeadlineRow& b) {
      return a.tokens_per_s_per_device > b.tokens_per_s_per_device;
    });
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

void write_headline_markdown(std::ostream& out, const std::vector<HeadlineRow>& rows) {
  const auto h = header(rows);
  out << "|";
  for (const auto& c : h) out << " " << c << " |";
  out << "\n|---|";
  for (size_t i = 1; i < h.size(); ++i) out << "---:|";
  out << "\n";
  for (const auto& row : cells(rows)) {
    out << "|";
    for (const auto& c : row) out << " " << c << " |";
    out << "\n";
  }
}

std::string latex_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '\\': out += "\\textbackslash{}"; break;
      case '~': out += "\\textasciitilde{}"; break;
      case '^': out += "\\textasciicircum{}"; break;
      case '_': case '%': case '&': case '#': case '$': case '{': case '}':
        out += '\\';
        out += ch;
        break;
      default: out += ch;
    }
  }
  return out;
}

void write_headline_latex(std::ostream& out, const std::vector<HeadlineRow>& rows) {
  const auto h = header(rows);
  out << "% Written by hlp-analyze report: the headline table (needs \\usepackage{booktabs}).\n"
      << "\\begin{table}[t]\n\\centering\n\\small\n\\begin{tabular}{l" << std::string(h.size() - 1, 'r')
      << "}\n\\toprule\n";
  for (size_t i = 0; i < h.size(); ++i) out << (i ? " & " : "") << latex_escape(h[i]);
  out << " \\\\\n\\midrule\n";
  for (const auto& row : cells(rows)) {
    for (size_t i = 0; i < row.size(); ++i)
      out << (i ? " & " : "") << (row[i] == "–" ? "--" : latex_escape(row[i]));
    out << " \\\\\n";
  }
  out << "\\bottomrule\n\\end{tabular}\n"
      << "\\caption{Tokens/s and peak memory per device (medians after warm-up; peak = max over "
         "ranks and steps); scaling efficiency $T_N / (N \\cdot T_1)$ against the single-device "
         "run; exposed communication and pipeline bubble as shares of the step.}\n"
      << "\\label{tab:hlp-headline}\n\\end{table}\n";
}

}  // namespace hlp::analysis
