#include "analysis/gnuplot.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace hlp::analysis {
namespace fs = std::filesystem;
namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

std::string no_gnuplot_note() {
  return "gnuplot is not on PATH: the figures' data and scripts (NAME.dat, NAME.gp) are written "
         "but not rendered (Debian/Ubuntu: apt-get install gnuplot-nox, then `gnuplot NAME.gp` in "
         "the report directory or run the report again)";
}

void write_gnuplot_script(const std::string& outdir, const std::string& name, const std::string& body) {
  const fs::path path = fs::path(outdir) / (name + ".gp");
  std::ofstream gp(path);
  gp << "# Written by hlp-analyze report. Edit freely and re-render in this directory with:\n"
     << "#   gnuplot " << name << ".gp\n"
     << "set terminal pngcairo size 960,600 noenhanced font ',11'\n"
     << "set output '" << name << ".png'\n"
     << "set grid\n"
     << "set key outside right top\n"
     << body << "\n"
     << "set terminal svg size 960,600 noenhanced font ',11' background rgb 'white'\n"
     << "set output '" << name << ".svg'\n"
     << "replot\n"
     << "unset output\n";
  if (!gp) throw user_error("cannot write '", path.string(), "' (is the output directory writable?)");
}

void render_gnuplot(const std::string& outdir, const std::string& name) {
  const std::string cmd = "cd " + shell_quote(outdir) + " && gnuplot " + shell_quote(name + ".gp") +
                          " > " + shell_quote(name + ".gnuplot.log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  const fs::path dir(outdir);
  std::error_code ec;
  const bool ok = status == 0 && fs::file_size(dir / (name + ".png"), ec) > 0 &&
                  fs::file_size(dir / (name + ".svg"), ec) > 0;
  if (!ok)
    throw user_error("gnuplot failed on '", (dir / (name + ".gp")).string(), "' (see ",
                     (dir / (name + ".gnuplot.log")).string(), ")");
  fs::remove(dir / (name + ".gnuplot.log"), ec);
}

}  // namespace hlp::analysis
