#pragma once
// Writing a figure as an editable pair (NAME.dat + NAME.gp) and rendering it with gnuplot to
// NAME.png (pngcairo) and NAME.svg. The scripts use paths relative to the output directory, so
// a person can edit NAME.gp and re-run `gnuplot NAME.gp` there.
#include <string>

namespace hlp::analysis {

// Whether gnuplot is on PATH.
bool have_gnuplot();
// The one line said when it is not (with the package to install).
std::string no_gnuplot_note();

// Writes OUTDIR/NAME.gp: a header, the PNG terminal, `body` (set commands + plot), then the SVG
// terminal and `replot`. Data files referenced by `body` must already be in OUTDIR.
void write_gnuplot_script(const std::string& outdir, const std::string& name, const std::string& body);

// Runs gnuplot on OUTDIR/NAME.gp inside OUTDIR; throws UserError (naming NAME.gnuplot.log)
// if it fails or does not produce both files.
void render_gnuplot(const std::string& outdir, const std::string& name);

// Quotes s for a gnuplot string literal (single quotes).
std::string gp_quote(const std::string& s);

}  // namespace hlp::analysis
