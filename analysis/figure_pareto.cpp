// The Pareto figures: one per context length, tokens/s per device against peak memory per
// device of every configuration, the front of each group (number of ranks) drawn as a line.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "analysis/figure_data.h"
#include "analysis/figures.h"
#include "analysis/findings.h"
#include "analysis/gnuplot.h"

namespace hlp::analysis {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Groups of one context length that differ only in the number of ranks share a figure.
std::string figure_key(const Group& g) {
  const ConfigRow& r = *g.rows.front();
  return r.value("model") + "\x1f" + r.value("device") + "\x1f" + r.value("precision") + "\x1f" +
         r.value("base_dtype") + "\x1f" + r.value("seq_len");
}

// gnuplot reads a double-quoted string as one column
std::string dat_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? '\'' : c;
  return q + "\"";
}

void write_points(std::ofstream& dat, const std::vector<const ConfigRow*>& rows, const Group& g,
                  double unit) {
  for (const ConfigRow* r : rows)
    dat << num(r->peak_bytes_max / unit) << " " << num(tokens_per_device(*r)) << " "
        << dat_quote(competitor_label(*r, g)) << "\n";
  dat << "\n\n";
}

Figure pareto_figure(const std::vector<const Group*>& groups, const std::string& name,
                     const std::string& dir) {
  const ConfigRow& ref = *groups.front()->rows.front();
  Figure fig = make_figure(
      name, "Throughput against memory, T " + ref.value("seq_len"),
      "Tokens/s per device (median after warm-up) against peak memory per device (max over "
      "ranks and steps) of every configuration at sequence length " + ref.value("seq_len") +
      "; the line joins each group's Pareto front (configurations no other one of the same "
      "number of ranks beats in both): up and to the left is better.");
  size_t points = 0;
  for (const Group* g : groups) points += g->rows.size();
  if (points < 2) {
    fig.skip_reason = "only one configuration at this sequence length";
    return fig;
  }
  double largest = 0;
  for (const Group* g : groups)
    for (const ConfigRow* r : g->rows) largest = std::max(largest, r->peak_bytes_max);
  const bool gib = largest >= kGiB;  // the CPU demo's peaks are a few MiB
  const double unit = gib ? kGiB : kGiB / 1024.0;
  std::ofstream dat(dir + "/" + name + ".dat");
  dat << "# blocks per group: every configuration, then its Pareto front (sorted by peak)\n"
      << "# peak_" << (gib ? "GiB" : "MiB") << "_per_device  tokens_per_s_per_device  label\n";
  std::string plot = "plot ";
  for (size_t i = 0; i < groups.size(); ++i) {
    auto front = pareto_front(groups[i]->rows);
    std::sort(front.begin(), front.end(), [](const ConfigRow* a, const ConfigRow* b) {
      return a->peak_bytes_max < b->peak_bytes_max;
    });
    write_points(dat, groups[i]->rows, *groups[i], unit);
    write_points(dat, front, *groups[i], unit);
    const std::string n = groups[i]->rows.front()->value("world_size"), lc = std::to_string(i + 1);
    plot += std::string(i ? ", \\\n     " : "") + "'" + name + ".dat' index " + std::to_string(2 * i) +
            " using 1:2 with points pt 7 ps 1.5 lc " + lc + " title 'n=" + n + "', \\\n     '' index " +
            std::to_string(2 * i) + " using 1:2:3 with labels offset char 1,0.7 left font ',9' " +
            "notitle";
    if (front.size() >= 2)
      plot += ", \\\n     '' index " + std::to_string(2 * i + 1) + " using 1:2 with lines dt 2 lw 2 lc " +
              lc + " title 'front n=" + n + "'";
  }
  write_gnuplot_script(dir, name,
                       "set title 'Throughput vs memory per device (" + ref.value("model") + ", T " +
                           ref.value("seq_len") + ")'\nset xlabel 'peak " + (gib ? "GiB" : "MiB") + " per device'\n"
                           "set ylabel 'tokens/s per device'\nset offsets graph 0.05, graph 0.35, "
                           "graph 0.1, 0\nset yrange [0:*]\nset key bottom right\n" + plot + "\n");
  fig.has_data = true;
  return fig;
}

}  // namespace

std::vector<Figure> pareto_figures(const std::vector<ConfigRow>& rows, const std::string& dir) {
  const auto groups = comparable_groups(rows);
  std::map<std::string, std::vector<const Group*>> by_figure;
  std::vector<std::string> order;
  for (const auto& g : groups) {
    const auto k = figure_key(g);
    if (!by_figure.count(k)) order.push_back(k);
    by_figure[k].push_back(&g);
  }
  std::vector<Figure> out;
  std::map<std::string, int> used;  // two models at one T: pareto_t128, pareto_t128_2
  for (const auto& k : order) {
    const std::string base = "pareto_t" + by_figure[k].front()->rows.front()->value("seq_len");
    const int n = ++used[base];
    out.push_back(pareto_figure(by_figure[k], n == 1 ? base : base + "_" + std::to_string(n), dir));
  }
  if (out.empty()) {
    out.push_back(make_figure("pareto", "Throughput against memory", ""));
    out.back().skip_reason = "no configuration was measured";
  }
  return out;
}

}  // namespace hlp::analysis
