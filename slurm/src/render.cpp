#include "render.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "train_options.h"

namespace hlp::sweep {
namespace fs = std::filesystem;
namespace {

const char* kRenderedMarker = "Rendered by hlp-sweep";

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw user_error("cannot read template '", path.string(), "' (use --templates DIR to point at slurm/templates)");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_text(const fs::path& path, const std::string& text, bool executable) {
  std::ofstream out(path);
  if (!out) throw user_error("cannot write '", path.string(), "' (is the --out directory writable?)");
  out << text;
  out.close();
  if (executable)
    fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add);
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) text += (i ? "\n" : "") + lines[i];
  return text;
}

fs::path resolve(const fs::path& base, const std::string& setting) {
  fs::path p(setting);
  return (p.is_absolute() ? p : base / p).lexically_normal();
}

// Earlier renders of this sweep: scripts carrying our marker and the per-task INI files.
void remove_previous_render(const fs::path& dir) {
  if (!fs::exists(dir)) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".sbatch") continue;
    if (read_text(entry.path()).find(kRenderedMarker) != std::string::npos) fs::remove(entry.path());
  }
  if (fs::exists(dir / "configs"))
    for (const auto& entry : fs::directory_iterator(dir / "configs"))
      if (entry.path().extension() == ".ini") fs::remove(entry.path());
}

// Options the analysis job adds to `hlp-analyze report`: the sweep's directory (its configs/
// and pruned.txt: the report lists configurations without a result file and those left out)
// and the site's charge rate, when it has one.
std::string analysis_report_options(Site site, const JobFile& job, const std::string& sweep_dir) {
  const std::optional<ChargeRate> rate = charge_rate(site, job);
  return " --sweep " + shell_quote(sweep_dir) + (rate ? " --su-per-gpu-hour " + rate->text() : "");
}

}  // namespace

std::string shell_quote(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::string("/._-+:=,@%").find(c) != std::string::npos);
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string fill_template(const std::string& text, const std::map<std::string, std::string>& values,
                          const std::string& template_name) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t open = text.find("{{", pos);
    if (open == std::string::npos) break;
    size_t close = text.find("}}", open);
    if (close == std::string::npos)
      throw user_error("template ", template_name, ": '{{' without '}}'");
    std::string key = text.substr(open + 2, close - open - 2);
    auto it = values.find(key);
    if (it == values.end()) {
      std::string known;
      for (const auto& kv : values) known += (known.empty() ? "" : ", ") + kv.first;
      throw user_error("template ", template_name, ": unknown placeholder {{", key, "}}; known: ", known);
    }
    out += text.substr(pos, open - pos) + it->second;
    pos = close + 2;
  }
  return out + text.substr(pos);
}

std::string results_dir_for(const JobFile& job, const RenderOptions& options) {
  const fs::path dir = fs::absolute(options.out_dir).lexically_normal();
  return options.results_dir.empty()
             ? resolve(dir, job.setting(site_name(options.site), "results-dir", "results")).string()
             : fs::absolute(options.results_dir).lexically_normal().string();
}

RenderedSweep render_sweep(const JobFile& job, const Sweep& sweep, const RenderOptions& options) {
  const std::string site = site_name(options.site);
  const fs::path dir = fs::absolute(options.out_dir).lexically_normal();
  RenderedSweep rendered;
  rendered.sweep_dir = dir.string();
  rendered.results_dir = results_dir_for(job, options);
  rendered.report_dir = options.report_dir.empty()
                            ? resolve(dir, job.setting(site, "report-dir", "report")).string()
                            : fs::absolute(options.report_dir).lexically_normal().string();
  rendered.log_dir = (dir / "logs").string();
  std::error_code ec;
  for (const fs::path& d : {dir, dir / "configs", fs::path(rendered.log_dir)}) {
    fs::create_directories(d, ec);
    if (ec) throw user_error("cannot create directory '", d.string(), "': ", ec.message());
  }
  // Site checks (e.g. whole nodes on Bridges-2) before anything is written.
  std::vector<std::vector<std::string>> headers;
  for (const Shape& shape : sweep.shapes) headers.push_back(array_header(options.site, job, shape.ranks));
  const std::string report_options = analysis_report_options(options.site, job, rendered.sweep_dir);
  remove_previous_render(dir);

  const fs::path templates(options.template_dir);
  const std::string array_template = read_text(templates / "array.sbatch");
  const std::string analysis_template = read_text(templates / "analyze.sbatch");
  const std::string submit_template = read_text(templates / "submit.sh");

  std::vector<std::string> setup_lines = job.setting_list(site, "setup");
  std::string setup = setup_lines.empty()
                          ? "# (no setup lines; add e.g. 'setup = module load ...' to the job file's [job])"
                          : join_lines(setup_lines);
  std::map<std::string, std::string> common = {
      {"sweep", sweep.name},
      {"job_file", job.path},
      {"site", site},
      {"setup", setup},
      {"hlp_bin", shell_quote(options.hlp_bin)},
      {"sweep_dir", shell_quote(rendered.sweep_dir)},
      {"results_dir", shell_quote(rendered.results_dir)},
      {"report_dir", shell_quote(rendered.report_dir)},
      {"log_dir", rendered.log_dir},
  };

  for (const Config& config : sweep.configs) {
    const fs::path ini = dir / "configs" / (config.name + ".ini");
    write_text(ini, config_ini(sweep, config, job.path), false);
    check_with_hlp_train(ini.string(), config.name);
  }

  std::string array_list;
  for (size_t s = 0; s < sweep.shapes.size(); ++s) {
    const Shape& shape = sweep.shapes[s];
    std::string cases;
    for (size_t task = 0; task < shape.config_indices.size(); ++task)
      cases += (task ? "\n" : "") + std::string("  ") + std::to_string(task) + ") config=" +
               sweep.configs[shape.config_indices[task]].name + " ;;";
    std::map<std::string, std::string> values = common;
    values["shape"] = shape.name;
    values["ranks"] = std::to_string(shape.ranks);
    values["task_count"] = std::to_string(shape.config_indices.size());
    values["last_task"] = std::to_string(shape.config_indices.size() - 1);
    values["site_header"] = join_lines(headers[s]);
    values["time"] = job.setting(site, "time", kDefaultTimeLimit);
    values["signal_before_end_s"] = job.setting(site, "signal-before-end-s", "120");
    values["launcher"] = launcher_line(options.site, job);
    values["task_cases"] = cases;
    std::string file = shape.name + ".sbatch";
    write_text(dir / file, fill_template(array_template, values, "array.sbatch"), true);
    rendered.array_scripts.push_back(file);
    array_list += (array_list.empty() ? "" : " ") + file;
  }

  std::map<std::string, std::string> values = common;
  values["site_header"] = join_lines(analysis_header(options.site, job));
  values["time"] = job.setting(site, "analysis-time", "00:30:00");
  values["report_options"] = report_options;
  rendered.analysis_script = sweep.name + "-analyze.sbatch";
  write_text(dir / rendered.analysis_script, fill_template(analysis_template, values, "analyze.sbatch"), true);

  values = common;
  values["config_count"] = std::to_string(sweep.configs.size());
  values["array_count"] = std::to_string(sweep.shapes.size());
  values["array_scripts"] = array_list;
  values["analysis_script"] = rendered.analysis_script;
  rendered.submit_script = (dir / "submit.sh").string();
  write_text(rendered.submit_script, fill_template(submit_template, values, "submit.sh"), true);
  return rendered;
}

}  // namespace hlp::sweep
