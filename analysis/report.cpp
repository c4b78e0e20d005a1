#include "analysis/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "analysis/figures.h"
#include "analysis/gnuplot.h"
#include "analysis/headline.h"
#include "analysis/number_text.h"
#include "analysis/table_writer.h"
#include "common/error.h"

namespace hlp::analysis {
namespace fs = std::filesystem;
namespace {

template <typename Writer>
void write_file(const std::string& outdir, const std::string& name, Writer write) {
  std::ofstream f(fs::path(outdir) / name);
  write(f);
  if (!f) throw user_error("cannot write '", (fs::path(outdir) / name).string(), "'");
}

// Each configuration of the sweep (configs/NAME.ini) whose result file NAME.h5 is neither among
// the results nor among the skipped files.
void missing_results(const std::string& sweep_dir, const std::set<std::string>& stems,
                     std::vector<NotMeasured>* out) {
  const fs::path configs = fs::path(sweep_dir) / "configs";
  if (!fs::is_directory(configs))
    throw user_error("--sweep '", sweep_dir, "': no configs/ directory (give hlp-sweep's --out)");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(configs))
    if (e.path().extension() == ".ini") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  for (const auto& n : names)
    if (!stems.count(n))
      out->push_back({n, "no result file: the task failed before its first flush, or never ran "
                         "(see the sweep's logs/)"});
}

// pruned.txt: "NAME: why" per configuration hlp-sweep's planner left out ('#' comments).
void left_out(const std::string& sweep_dir, std::vector<NotMeasured>* out) {
  std::ifstream f(fs::path(sweep_dir) / "pruned.txt");
  std::string line;
  while (std::getline(f, line)) {
    const auto colon = line.find(": ");
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    out->push_back({line.substr(0, colon), "left out before submission: " + line.substr(colon + 2)});
  }
}

}  // namespace

void write_cost(std::ostream& out, const std::vector<ConfigRow>& rows, double su_rate) {
  bool gpu = false;
  for (const auto& r : rows) gpu = gpu || r.value("device") != "cpu";
  const std::string unit = gpu ? "GPU-hours" : "rank-hours";
  const bool sus = gpu && !std::isnan(su_rate);
  out << "## Cost\n\nMeasured " << unit << " per configuration: Σ over its runs of (end − start of "
      << "the job) × ranks" << (sus ? ", and service units at " + fmt("%g", su_rate) + " SU per GPU-hour" : "")
      << (gpu && !sus ? " (give `--su-per-gpu-hour` for service units)" : "")
      << (!gpu ? " (CPU ranks: no service units)" : "")
      << ". Runs without an end time (killed) are not counted.\n\n| configuration | runs | "
      << unit << " |" << (sus ? " SUs |" : "") << "\n|---|---:|---:|" << (sus ? "---:|" : "") << "\n";
  double total = 0;
  for (const auto& r : rows) {
    out << "| " << r.value("strategy") << " n=" << r.value("world_size") << " T " << r.value("seq_len")
        << " | " << r.runs << " | " << (std::isnan(r.device_hours) ? "–" : fmt("%.4f", r.device_hours))
        << " |" << (sus ? " " + fmt("%.3f", r.device_hours * su_rate) + " |" : "") << "\n";
    if (!std::isnan(r.device_hours)) total += r.device_hours;
  }
  out << "| **total** | | **" << fmt("%.4f", total) << "** |"
      << (sus ? " **" + fmt("%.3f", total * su_rate) + "** |" : "") << "\n\n";
}

namespace {

void write_figure_sections(std::ostream& index, const std::vector<Figure>& figures,
                           ReportSummary* summary) {
  for (const auto& f : figures) {
    index << "## " << f.title << "\n\n";
    if (f.has_data && !summary->gnuplot) {
      index << f.sentence << "\n\nNot rendered: gnuplot script [" << f.name << ".gp](" << f.name
            << ".gp), data [" << f.name << ".dat](" << f.name << ".dat)\n\n";
    } else if (f.has_data) {
      ++summary->figures_rendered;
      index << f.sentence << "\n\n![" << f.title << "](" << f.name << ".png)\n\n"
            << "[SVG](" << f.name << ".svg) · gnuplot script [" << f.name << ".gp](" << f.name
            << ".gp) · data [" << f.name << ".dat](" << f.name << ".dat)\n\n";
    } else {
      ++summary->figures_skipped;
      index << "*Skipped (`" << f.name << "`): " << f.skip_reason << ".*\n\n";
    }
  }
}

}  // namespace

std::vector<NotMeasured> not_measured(const std::vector<Skip>& skipped,
                                      const std::vector<std::string>& result_paths,
                                      const std::string& sweep_dir) {
  std::vector<NotMeasured> out;
  std::set<std::string> stems;
  for (const auto& s : skipped) {
    out.push_back({s.path, s.reason});
    stems.insert(fs::path(s.path).stem().string());
  }
  for (const auto& p : result_paths) stems.insert(fs::path(p).stem().string());
  if (!sweep_dir.empty()) {
    missing_results(sweep_dir, stems, &out);
    left_out(sweep_dir, &out);
  }
  return out;
}

ReportSummary write_report(const std::vector<ConfigRow>& rows, const std::vector<Skip>& skipped,
                           const std::string& outdir, const ReportOptions& options) {
  std::error_code ec;
  fs::create_directories(outdir, ec);
  if (ec || !fs::is_directory(outdir))
    throw user_error("cannot create output directory '", outdir, "': ", ec.message());
  std::vector<std::string> paths;
  for (const auto& r : rows) paths.insert(paths.end(), r.paths.begin(), r.paths.end());
  ReportSummary summary;
  summary.gnuplot = have_gnuplot();
  const auto missing = not_measured(skipped, paths, options.sweep_dir);
  summary.not_measured = missing.size();

  std::ostringstream md;
  write_markdown(md, rows, options.warmup_steps);
  write_file(outdir, "table.md", [&](std::ostream& f) { f << md.str(); });
  write_file(outdir, "table.csv", [&](std::ostream& f) { write_csv(f, rows); });
  const auto headline = headline_rows(rows);
  std::ostringstream head;
  write_headline_markdown(head, headline);
  write_file(outdir, "headline.md", [&](std::ostream& f) { f << head.str(); });
  write_file(outdir, "table.tex", [&](std::ostream& f) { write_headline_latex(f, headline); });
  const auto figures = write_figures(rows, outdir);
  for (const auto& f : figures)
    if (f.has_data && summary.gnuplot) render_gnuplot(outdir, f.name);

  int64_t files = 0;
  for (const auto& r : rows) files += r.runs;
  std::ostringstream index;
  index << "# HLP results report\n\nWritten by `hlp-analyze report` from " << rows.size()
        << " configuration(s) in " << files << " result file(s).\n\n";
  write_findings(index, rows, missing);
  index << "## Headline table\n\nFastest first within each group. Also as [headline.md](headline.md) "
           "and, for a paper, LaTeX [table.tex](table.tex) (booktabs); every column in "
           "[table.csv](table.csv).\n\n"
        << head.str() << "\n";
  write_cost(index, rows, options.su_per_gpu_hour);
  index << "## Full table\n\nAlso as [table.md](table.md) and [table.csv](table.csv) "
           "(every column, full precision).\n\n"
        << md.str() << "\n";
  if (!summary.gnuplot) index << "*Figures not rendered: " << no_gnuplot_note() << ".*\n\n";
  write_figure_sections(index, figures, &summary);
  write_file(outdir, "index.md", [&](std::ostream& f) { f << index.str(); });
  return summary;
}

}  // namespace hlp::analysis
