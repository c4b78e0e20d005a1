#pragma once
// Helpers the report's figures share: choosing the rows of one "slice" (rows equal in every
// column a figure does not vary), series per strategy, and the .dat / plot-command writers.
#include <map>
#include <string>
#include <vector>

#include "analysis/aggregate.h"
#include "analysis/figures.h"

namespace hlp::analysis {

inline constexpr double kMiB = 1024.0 * 1024.0;

// Columns that stay fixed while a figure varies ranks / context: the "same experiment".
extern const std::vector<std::string> kModelSlice;

// The rows of the slice (rows equal in `cols`) where `varying` takes the most distinct values
// (ties: the slice with more rows, then the first in table order).
std::vector<const ConfigRow*> best_slice(const std::vector<const ConfigRow*>& rows,
                                         const std::vector<std::string>& cols,
                                         const std::string& varying);
std::vector<const ConfigRow*> all_rows(const std::vector<ConfigRow>& rows);

std::string num(double v);  // "%.10g", "NaN" for NaN (gnuplot skips it)
Figure make_figure(std::string name, std::string title, std::string sentence);
std::string label(const ConfigRow& r);  // "ddp n=2"

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // sorted by x, one per x
};

// One series per name_of(row): x = column `x_col` (number), y = y_of(row); the first row at
// each x wins.
template <typename N, typename F>
std::vector<Series> series_by(const std::vector<const ConfigRow*>& rows, const std::string& x_col,
                              N name_of, F y_of) {
  std::map<std::string, std::map<double, double>> by;
  for (const ConfigRow* r : rows) {
    const double x = double(r->config_int(x_col));
    const double y = y_of(*r);
    if (x < 0 || y != y) continue;  // y != y: NaN
    by[name_of(*r)].emplace(x, y);
  }
  std::vector<Series> out;
  for (const auto& [name, pts] : by) out.push_back({name, {pts.begin(), pts.end()}});
  return out;
}

// Per strategy (series_by with the strategy as the name).
template <typename F>
std::vector<Series> series_by_strategy(const std::vector<const ConfigRow*>& rows,
                                       const std::string& x_col, F y_of) {
  return series_by(rows, x_col, [](const ConfigRow& r) { return r.value("strategy"); }, y_of);
}

// Blocks separated by two blank lines (`index i` in gnuplot is series i); with ideal_column a
// third column scales the first point linearly in x.
void write_series(const std::string& path, const std::vector<Series>& series,
                  const std::string& header, bool ideal_column);
// "plot 'dat' index 0 using 1:2 ..., ..." with one line (+ dashed ideal lines) per series.
std::string series_plot(const std::string& dat, const std::vector<Series>& series, bool ideal);

}  // namespace hlp::analysis
