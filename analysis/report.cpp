#include "analysis/report.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/figures.h"
#include "analysis/gnuplot.h"
#include "analysis/table_writer.h"
#include "common/error.h"

namespace hlp::analysis {
namespace fs = std::filesystem;

ReportSummary write_report(const std::vector<ConfigRow>& rows, const std::vector<Skip>& skipped,
                           const std::string& outdir, int64_t warmup_steps) {
  require_gnuplot();  // before writing anything
  std::error_code ec;
  fs::create_directories(outdir, ec);
  if (ec || !fs::is_directory(outdir))
    throw user_error("cannot create output directory '", outdir, "': ", ec.message());

  std::ostringstream md;
  write_markdown(md, rows, warmup_steps);
  std::ofstream(fs::path(outdir) / "table.md") << md.str();
  {
    std::ofstream csv(fs::path(outdir) / "table.csv");
    write_csv(csv, rows);
    if (!csv) throw user_error("cannot write '", (fs::path(outdir) / "table.csv").string(), "'");
  }

  ReportSummary summary;
  const auto figures = write_figures(rows, outdir);
  for (const auto& f : figures) {
    if (!f.has_data) continue;
    render_gnuplot(outdir, f.name);
  }

  std::ofstream index(fs::path(outdir) / "index.md");
  index << "# HLP results report\n\n"
        << "Written by `hlp-analyze report` from " << rows.size() << " configuration(s)";
  int64_t files = 0;
  for (const auto& r : rows) files += r.runs;
  index << " in " << files << " result file(s).";
  if (!skipped.empty()) index << " " << skipped.size() << " file(s) were skipped (listed at the end).";
  index << "\n\n## Table\n\nAlso as [table.md](table.md) and [table.csv](table.csv) "
           "(every column, full precision).\n\n"
        << md.str() << "\n";
  for (const auto& f : figures) {
    index << "## " << f.title << "\n\n";
    if (f.has_data) {
      ++summary.figures_rendered;
      index << f.sentence << "\n\n![" << f.title << "](" << f.name << ".png)\n\n"
            << "[SVG](" << f.name << ".svg) · gnuplot script [" << f.name << ".gp](" << f.name
            << ".gp) · data [" << f.name << ".dat](" << f.name << ".dat)\n\n";
    } else {
      ++summary.figures_skipped;
      index << "*Skipped (`" << f.name << "`): " << f.skip_reason << ".*\n\n";
    }
  }
  if (!skipped.empty()) {
    index << "## Skipped files\n\n";
    for (const auto& s : skipped) index << "- `" << s.path << "`: " << s.reason << "\n";
  }
  if (!index) throw user_error("cannot write '", (fs::path(outdir) / "index.md").string(), "'");
  return summary;
}

}  // namespace hlp::analysis
