#pragma once
// An experiment file (jobs/*.ini, Boost.Program_options INI syntax, documented in jobs/README.md):
//
//   name = local                      job settings: top level or [job]; per-site overrides in
//   [job]                             [local], [psc-bridges2], [generic]
//   time = 00:10:00
//   [fixed]                           hlp-train options copied into every configuration
//   model = tiny
//   [sweep]                           axes: an hlp-train option (or `ranks`) = comma-separated values
//   strategy = single, ddp, fsdp
//   ranks = 1, 2
//   exclude = strategy=single & ranks!=1
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exclude_rule.h"

namespace hlp::sweep {

struct KeyValue {
  std::string key;
  std::string value;
};

struct Axis {
  std::string name;                 // hlp-train option or "ranks"
  std::vector<std::string> values;  // in file order
};

// The time limit of the array tasks when a job file gives none (sbatch --time).
inline constexpr const char* kDefaultTimeLimit = "01:00:00";

// The settings a job file may give in [job] or a site section, with their meaning.
struct SettingInfo {
  std::string name;
  std::string help;
};
const std::vector<SettingInfo>& job_settings();

struct JobFile {
  std::string path;                 // as given, for messages
  std::map<std::string, std::vector<std::string>> settings;  // [job] + top level; repeatable keys keep all
  std::map<std::string, std::map<std::string, std::vector<std::string>>> site_settings;  // by site
  std::vector<KeyValue> fixed;      // [fixed] (+ top-level hlp-train options), file order
  std::vector<Axis> axes;           // [sweep], file order: the first axis is the outermost loop
  std::vector<ExcludeRule> excludes;

  // The last value of a setting for `site`: the site section wins over [job]; `fallback` if unset.
  std::string setting(const std::string& site, const std::string& key,
                      const std::string& fallback = "") const;
  // Every value of a repeatable setting (`setup`), [job] first then the site section.
  std::vector<std::string> setting_list(const std::string& site, const std::string& key) const;
};

// A setting holding a number >= 0 (`su-per-gpu-hour`, `startup-s`): nullopt when unset; throws
// UserError naming the file, the setting and `meaning` when it is not such a number.
std::optional<double> number_setting(const JobFile& job, const std::string& site,
                                     const std::string& key, const std::string& meaning);

JobFile read_job_file(const std::string& path);                         // throws UserError
JobFile parse_job_file(std::istream& in, const std::string& path);      // throws UserError

// "a, b ,c" -> {"a","b","c"}; a value in double quotes may contain commas ("0,4,8").
std::vector<std::string> split_list(const std::string& text, const std::string& where);

}  // namespace hlp::sweep
