#include "plan_prune.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "launch.h"

namespace hlp::sweep {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> split_csv(const std::string& line, size_t columns) {
  // hlp-plan's CSV quotes nothing; its last column (problem) is free text and may hold commas
  std::vector<std::string> out;
  size_t begin = 0;
  while (out.size() + 1 < columns) {
    const size_t comma = line.find(',', begin);
    if (comma == std::string::npos) break;
    out.push_back(line.substr(begin, comma - begin));
    begin = comma + 1;
  }
  out.push_back(line.substr(begin));
  return out;
}

// NaN when `text` is not a number (hlp-plan's CSV field of a run it could not predict).
double parse_double(const std::string& text) {
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return NAN;
  }
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

}  // namespace

std::string site_gpu_type(const std::string& site, const JobFile& job) {
  if (site == "psc-bridges2") return job.setting(site, "gpu-type", "v100-32");
  if (site == "generic") return job.setting(site, "gpu-type", "");
  return "";
}

PlanPrune prune_by_plan(Sweep& sweep, const JobFile& job, const std::string& gpu,
                        const std::string& plan_binary, const std::string& work_dir) {
  PlanPrune result;
  std::vector<int> planned;  // indices into sweep.configs of the GPU configurations
  for (size_t i = 0; i < sweep.configs.size(); ++i)
    if (sweep.configs[i].value("device") == "cuda") planned.push_back(int(i));
  if (gpu.empty() || planned.empty()) return result;
  result.gpu = gpu;
  fs::create_directories(work_dir);
  const std::string list = (fs::path(work_dir) / "runs.txt").string();
  {
    std::ofstream runs(list);
    for (int i : planned) {
      const Config& c = sweep.configs[size_t(i)];
      const std::string ini = (fs::path(work_dir) / (c.name + ".ini")).string();
      std::ofstream(ini) << config_ini(sweep, c, job.path);
      runs << c.ranks << " " << fs::absolute(ini).string() << "\n";
    }
    if (!runs) throw user_error("cannot write ", list);
  }
  std::cout << "planning " << planned.size() << " GPU configuration(s) on " << gpu
            << " with hlp-plan (activations probed on this CPU; --no-plan skips this) ..."
            << std::endl;
  const std::string csv_path = (fs::path(work_dir) / "plan.csv").string();
  std::string output;
  const int status = run_process({plan_binary, "--runs", list, "--gpu", gpu}, "", &output);
  std::ofstream(csv_path) << output;
  if (status != 0) {
    std::string last;
    std::istringstream lines(output);
    for (std::string l; std::getline(lines, l);)
      if (!l.empty()) last = l;
    throw user_error("hlp-plan failed (exit ", status, "): ", last, " (its output: ", csv_path,
                     "; --no-plan renders without it)");
  }
  // header, then one row per run in the list's order
  std::istringstream lines(output);
  std::string line;
  std::vector<std::string> header;
  std::map<int, std::map<std::string, std::string>> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("run,", 0) == 0) {
      header = split_csv(line, std::string::npos);
      continue;
    }
    if (header.empty() || line.empty()) continue;
    const auto fields = split_csv(line, header.size());
    if (fields.size() != header.size()) continue;
    std::map<std::string, std::string> row;
    for (size_t k = 0; k < header.size(); ++k) row[header[k]] = fields[k];
    try {
      rows[std::stoi(row["run"])] = row;
    } catch (const std::exception&) {
    }
  }
  std::vector<bool> drop(sweep.configs.size(), false);
  for (size_t k = 0; k < planned.size(); ++k) {
    const Config& c = sweep.configs[size_t(planned[k])];
    auto it = rows.find(int(k));
    if (it == rows.end()) {
      result.unplanned.push_back({c.name, "hlp-plan gave no row"});
      continue;
    }
    if (!it->second["problem"].empty())  // hlp-train would refuse it on the cluster
      throw user_error(job.path, ": configuration '", c.name, "' cannot run: ",
                       it->second["problem"], " (hlp-plan); exclude it or change the job file");
    auto& row = it->second;
    const double peak = parse_double(row["predicted_peak_bytes"]);
    const double reserve = parse_double(row["reserve_bytes"]);
    const double limit = parse_double(row["limit_bytes"]);
    if (!std::isfinite(peak) || !std::isfinite(reserve) || !std::isfinite(limit)) {
      result.unplanned.push_back({c.name, "hlp-plan gave no finite prediction"});  // kept
      continue;
    }
    ++result.planned;
    if (row["fits"] == "1") {
      const double step_s = parse_double(row["step_s"]);
      if (std::isfinite(step_s) && step_s > 0) result.step_s[c.name] = step_s;
      continue;
    }
    result.pruned.push_back({c.name, "predicted " + gib(peak) + " + " + gib(reserve) +
                                         " reserve per rank > " + gib(limit) + " of a " + gpu});
    drop[size_t(planned[k])] = true;
  }
  if (result.pruned.empty()) return result;
  std::vector<Config> kept;
  for (size_t i = 0; i < sweep.configs.size(); ++i)
    if (!drop[i]) kept.push_back(sweep.configs[i]);
  if (kept.empty())
    throw user_error(job.path, ": every configuration is predicted not to fit on a ", gpu,
                     " (", csv_path, "); shorten seq-len, checkpoint activations or add ranks");
  sweep.configs = std::move(kept);
  sweep.pruned = int(result.pruned.size());
  group_shapes(sweep);
  return result;
}

}  // namespace hlp::sweep
