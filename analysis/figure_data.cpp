#include "analysis/figure_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "analysis/gnuplot.h"

namespace hlp::analysis {
namespace {
std::string slice_key(const ConfigRow& r, const std::vector<std::string>& cols) {
  std::string k;
  for (const auto& c : cols) k += r.value(c) + "\x1f";
  return k;
}
}  // namespace

const std::vector<std::string> kModelSlice = {"model",     "pattern",    "lora_rank",
                                              "micro_batch", "precision", "base_dtype",
                                              "device",    "act_ckpt",   "gdn_mode",
                                              "attn_impl"};

std::vector<const ConfigRow*> best_slice(const std::vector<const ConfigRow*>& rows,
                                         const std::vector<std::string>& cols,
                                         const std::string& varying) {
  std::map<std::string, std::vector<const ConfigRow*>> slices;
  std::vector<std::string> order;
  for (const ConfigRow* r : rows) {
    const auto k = slice_key(*r, cols);
    if (!slices.count(k)) order.push_back(k);
    slices[k].push_back(r);
  }
  std::vector<const ConfigRow*> best;
  size_t best_distinct = 0;
  for (const auto& k : order) {
    std::set<std::string> distinct;
    for (const ConfigRow* r : slices[k]) distinct.insert(varying.empty() ? "" : r->value(varying));
    if (distinct.size() > best_distinct ||
        (distinct.size() == best_distinct && slices[k].size() > best.size())) {
      best = slices[k];
      best_distinct = distinct.size();
    }
  }
  return best;
}

std::vector<const ConfigRow*> all_rows(const std::vector<ConfigRow>& rows) {
  std::vector<const ConfigRow*> p;
  for (const auto& r : rows) p.push_back(&r);
  return p;
}

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

Figure make_figure(std::string name, std::string title, std::string sentence) {
  Figure f;
  f.name = std::move(name);
  f.title = std::move(title);
  f.sentence = std::move(sentence);
  return f;
}

void write_series(const std::string& path, const std::vector<Series>& series,
                  const std::string& header, bool ideal_column) {
  std::ofstream f(path);
  f << "# " << header << "\n";
  for (const auto& s : series) {
    f << "# series: " << s.name << "\n";
    for (const auto& [x, y] : s.points) {
      f << num(x) << " " << num(y);
      if (ideal_column) f << " " << num(s.points.front().second * x / s.points.front().first);
      f << "\n";
    }
    f << "\n\n";
  }
}

std::string series_plot(const std::string& dat, const std::vector<Series>& series, bool ideal) {
  std::ostringstream p;
  p << "plot ";
  for (size_t i = 0; i < series.size(); ++i) {
    if (i) p << ", \\\n     ";
    // Distinct markers, shrinking with i: curves that coincide (parity) stay visible as
    // nested markers instead of hiding each other.
    static const int kPointTypes[] = {7, 5, 9, 11, 13, 4, 6, 8, 10, 12, 14, 1};
    char size[16];
    std::snprintf(size, sizeof size, "%.1f", std::max(0.6, 1.8 - 0.25 * double(i)));
    p << "'" << dat << "' index " << i << " using 1:2 with linespoints lw 2 pt "
      << kPointTypes[i % 12] << " ps " << size << " lc " << i + 1 << " title "
      << gp_quote(series[i].name);
    // One dashed ideal line per distinct starting point (strategies that share the `single`
    // baseline share one line).
    bool shared = false, first_of_start = true;
    for (size_t j = 0; j < series.size(); ++j) {
      if (j == i) continue;
      if (series[j].points.front() == series[i].points.front()) {
        shared = true;
        if (j < i) first_of_start = false;
      }
    }
    if (ideal && first_of_start)
      p << ", \\\n     '" << dat << "' index " << i << " using 1:3 with lines dt 2 lw 2 lc "
        << (shared ? std::string("rgb 'black'") : std::to_string(i + 1)) << " title "
        << gp_quote(shared ? std::string("ideal linear scaling") : series[i].name + " ideal");
  }
  return p.str();
}

std::string label(const ConfigRow& r) {
  return r.value("strategy") + " n=" + r.value("world_size");
}

}  // namespace hlp::analysis
