#include "job_file.h"

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/parsers.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli/program_options_error.h"
#include "common/error.h"
#include "common/printable.h"
#include "train_options.h"

namespace hlp::sweep {
namespace po = boost::program_options;

const std::vector<SettingInfo>& job_settings() {
  static const std::vector<SettingInfo> settings = {
      {"name", "sweep name: names the scripts, jobs and result folder (default: the file name)"},
      {"time", "wall-time limit of every array task, sbatch --time (default 01:00:00)"},
      {"analysis-time", "wall-time limit of the analysis job (default 00:30:00)"},
      {"results-dir", "where the .h5 result files go; relative = inside --out (default results)"},
      {"report-dir", "where hlp-analyze writes the report; relative = inside --out (default report)"},
      {"launcher", "srun (default on local and generic), mpirun (Open MPI's, inside the allocation; default on psc-bridges2) or mpiexec"},
      {"srun-mpi", "srun --mpi plugin (default: local this build's MPI's, pmi2 for MPICH and pmix for Open MPI; elsewhere pmi2)"},
      {"setup", "a shell line run before launching, e.g. module load ...; repeatable"},
      {"account", "sbatch --account"},
      {"partition", "partition of the array jobs (default: chosen by the site)"},
      {"analysis-partition", "partition of the analysis job (default: chosen by the site)"},
      {"gpu-type", "psc-bridges2: v100-32 (default) or h100-80"},
      {"gpus-per-node", "psc-bridges2: GPUs of a full node (default 8)"},
      {"gpus-per-task", "generic: sbatch --gpus-per-task (default 1; 0 = do not ask for GPUs)"},
      {"cpus-per-task", "sbatch --cpus-per-task (default: not set)"},
      {"mem", "sbatch --mem (default: not set)"},
      {"exclusive", "yes/no: sbatch --exclusive (default yes on local so timings do not share cores)"},
      {"node-cpus", "local: CPUs of the node; more ranks than this adds --overcommit (default 4)"},
      {"signal-before-end-s", "seconds before the time limit Slurm sends USR1 to checkpoint (default 120)"},
      {"su-per-gpu-hour", "service units one GPU-hour costs (default: the site's rate for its GPU type, if it has one)"},
      {"startup-s", "seconds a task spends outside its training steps, for the cost estimate (default: measured, slurm/README.md)"},
      {"train-options", "extra hlp-train option names this file may use (comma-separated)"},
  };
  return settings;
}

namespace {

const std::set<std::string> kSites = {"local", "psc-bridges2", "generic"};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool is_setting(const std::string& key) {
  for (const SettingInfo& s : job_settings())
    if (s.name == key) return true;
  return false;
}

std::string setting_names() {
  std::string list;
  for (const SettingInfo& s : job_settings()) list += (list.empty() ? "" : ", ") + s.name;
  return list;
}

std::string option_names(const std::set<std::string>& extra) {
  std::string list = "ranks";
  for (const TrainOption& o : train_options())
    if (!per_task_options().count(o.name)) list += ", " + o.name;
  for (const std::string& e : extra) list += ", " + e;
  return list;
}

}  // namespace

std::vector<std::string> split_list(const std::string& text, const std::string& where) {
  std::vector<std::string> items;
  std::string current;
  bool quoted = false, was_quoted = false;
  auto finish = [&]() {
    std::string item = was_quoted ? current : trim(current);
    if (item.empty()) throw user_error(where, ": empty value in the list '", text, "'");
    items.push_back(item);
    current.clear();
    was_quoted = false;
  };
  for (char c : text) {
    if (c == '"') {
      if (!quoted) current = trim(current);
      quoted = !quoted;
      was_quoted = true;
    } else if (c == ',' && !quoted) {
      finish();
    } else if (!(was_quoted && !quoted)) {
      current += c;  // text after a closing quote is ignored only if it is blank
    } else if (c != ' ' && c != '\t') {
      throw user_error(where, ": unexpected text after a quoted value in '", text, "'");
    }
  }
  if (quoted) throw user_error(where, ": unterminated \" in '", text, "'");
  finish();
  return items;
}

std::string JobFile::setting(const std::string& site, const std::string& key,
                             const std::string& fallback) const {
  auto s = site_settings.find(site);
  if (s != site_settings.end()) {
    auto v = s->second.find(key);
    if (v != s->second.end() && !v->second.empty()) return v->second.back();
  }
  auto v = settings.find(key);
  if (v != settings.end() && !v->second.empty()) return v->second.back();
  return fallback;
}

std::vector<std::string> JobFile::setting_list(const std::string& site, const std::string& key) const {
  std::vector<std::string> all;
  auto v = settings.find(key);
  if (v != settings.end()) all = v->second;
  auto s = site_settings.find(site);
  if (s != site_settings.end()) {
    auto w = s->second.find(key);
    if (w != s->second.end()) all.insert(all.end(), w->second.begin(), w->second.end());
  }
  return all;
}

std::optional<double> number_setting(const JobFile& job, const std::string& site,
                                     const std::string& key, const std::string& meaning) {
  const std::string text = job.setting(site, key);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value) || value < 0)
    throw user_error(job.path, ": '", key, " = ", text, "' must be a number >= 0 (", meaning, ")");
  return value;
}

JobFile parse_job_file(std::istream& in, const std::string& path) {
  po::parsed_options parsed(nullptr);
  try {
    po::options_description none;
    parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  } catch (po::error& e) {
    throw user_error(path, ": ", printable(hlp::cli::program_options_message(e)),
                     " (expected 'key = value' lines and [section] headers)");
  }

  JobFile job;
  job.path = path;
  std::vector<std::string> rule_texts;
  // Pass 1: sort every key into settings / fixed / axes. Rules are parsed once all names are known.
  for (const po::basic_option<char>& option : parsed.options) {
    std::string full = option.string_key;
    std::string value = option.value.empty() ? "" : trim(option.value.front());
    size_t dot = full.find('.');
    std::string section = dot == std::string::npos ? "" : full.substr(0, dot);
    std::string key = dot == std::string::npos ? full : full.substr(dot + 1);
    std::string where = path + (section.empty() ? "" : " [" + section + "]");

    if (per_task_options().count(key) && (section.empty() || section == "fixed" || section == "sweep"))
      throw user_error(where, ": '", key, "' is set by hlp-sweep for every task; remove it from the job file");
    if (key == "exclude" && section != "sweep")
      throw user_error(where, ": exclude rules belong in [sweep] (found 'exclude = ", value, "')");
    if (section == "job" || (section.empty() && is_setting(key)) || kSites.count(section)) {
      if (!is_setting(key))
        throw user_error(where, ": unknown setting '", key, "'; settings are: ", setting_names());
      if (kSites.count(section)) job.site_settings[section][key].push_back(value);
      else job.settings[key].push_back(value);
    } else if (section == "fixed" || section.empty()) {
      job.fixed.push_back({key, value});  // names checked below (train-options may extend them)
    } else if (section == "sweep") {
      if (key == "exclude") rule_texts.push_back(value);
      else job.axes.push_back({key, split_list(value, where + " " + key)});
    } else {
      throw user_error(where, ": unknown section [", section,
                       "]; sections are [job], [fixed], [sweep], [local], [psc-bridges2], [generic]");
    }
  }

  // Pass 2: names and values of hlp-train options.
  std::set<std::string> extra;
  for (const std::string& list : job.setting_list("", "train-options"))
    for (const std::string& name : split_list(list, path + " train-options")) extra.insert(name);
  std::set<std::string> known = {"ranks"};
  auto check = [&](const std::string& key, const std::string& value, const std::string& where) {
    if (key == "ranks") {
      TrainOption ranks{"ranks", ValueKind::integer, {}, "n"};
      check_option_value(ranks, value, where);
      if (value == "0") throw user_error(where, ": 'ranks = 0': a configuration needs at least one rank");
      return;
    }
    if (extra.count(key)) return;
    const TrainOption* option = find_train_option(key);
    if (!option)
      throw user_error(where, ": '", key, "' is not an hlp-train option; valid names are: ",
                       option_names(extra), " (or declare it with train-options = ", key, ")");
    check_option_value(*option, value, where);
  };
  // Paths are relative to where hlp-sweep runs; tasks run elsewhere (sbatch --chdir), so make
  // them absolute now.
  auto absolute_path = [](const std::string& key, std::string& value) {
    bool is_path = key == "data" || (key == "tokenizer" && value != "byte");
    if (is_path && !value.empty() && value[0] != '/')
      value = std::filesystem::absolute(value).lexically_normal().string();
  };
  for (KeyValue& kv : job.fixed) absolute_path(kv.key, kv.value);
  for (Axis& axis : job.axes)
    for (std::string& v : axis.values) absolute_path(axis.name, v);

  std::set<std::string> seen;
  for (const KeyValue& kv : job.fixed) {
    check(kv.key, kv.value, path + " [fixed]");
    if (!seen.insert(kv.key).second) throw user_error(path, ": '", kv.key, "' is set twice in [fixed]");
  }
  for (const Axis& axis : job.axes) {
    if (axis.name != "ranks" && !extra.count(axis.name) && !find_train_option(axis.name))
      throw user_error(path, " [sweep]: unknown axis '", axis.name, "'; valid axes are: ",
                       option_names(extra), " (or declare it with train-options = ", axis.name, ")");
    for (const std::string& v : axis.values) check(axis.name, v, path + " [sweep] " + axis.name);
    if (!seen.insert(axis.name).second)
      throw user_error(path, ": '", axis.name, "' is both fixed and swept, or swept twice; keep one");
    std::set<std::string> distinct(axis.values.begin(), axis.values.end());
    if (distinct.size() != axis.values.size())
      throw user_error(path, " [sweep]: axis '", axis.name, "' lists a value twice");
  }
  known.insert(seen.begin(), seen.end());
  for (const char* implied : {"tp", "pp", "cp"}) known.insert(implied);  // default 1 when unset
  for (const std::string& text : rule_texts) job.excludes.emplace_back(text, known);

  std::string launcher = job.setting("", "launcher", "srun");
  if (launcher != "srun" && launcher != "mpirun" && launcher != "mpiexec")
    throw user_error(path, ": 'launcher = ", launcher, "' must be srun, mpirun or mpiexec");
  return job;
}

JobFile read_job_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw user_error("cannot read job file '", path, "' (does it exist and is it readable?)");
  return parse_job_file(in, path);
}

}  // namespace hlp::sweep
