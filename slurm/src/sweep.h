#pragma once
// Expanding a job file into configurations (the cartesian product of the axes minus the
// excluded ones), checking each one is possible, and grouping them by resource shape: every
// shape becomes one Slurm job array, every configuration one array task.
#include <string>
#include <vector>

#include "job_file.h"

namespace hlp::sweep {

struct Config {
  std::string name;                  // "fsdp2+tp2-n4-t256": names its INI, result and checkpoint
  std::string label;                 // "fsdp2+tp2 n=4 seq-len=256": progress lines
  int ranks = 1;
  std::vector<KeyValue> options;     // hlp-train options: fixed then swept, file order (no ranks)
  std::string value(const std::string& key) const;  // "" when unset
};

struct Shape {
  std::string name;                  // "<sweep>-n<ranks>": the array's job name and script name
  int ranks = 1;
  std::vector<int> config_indices;   // into Sweep::configs; array task i runs config_indices[i]
};

struct Sweep {
  std::string name;
  std::vector<Config> configs;       // expansion order: first axis outermost
  std::vector<Shape> shapes;         // ascending ranks
  int excluded = 0;                  // configurations dropped by exclude rules
  int pruned = 0;                    // configurations hlp-plan predicted not to fit (plan_prune.h)
};

// Throws UserError naming the configuration when one that is not excluded is impossible
// (e.g. ranks not divisible by tp*pp), and when the sweep ends up empty.
Sweep expand_sweep(const JobFile& job);

// One line per (model, tokenizer) of the sweep whose real model's vocabulary hlp-train would
// replace with a smaller tokenizer's (model::preset_vocabulary), naming its configurations. A
// tokenizer file that cannot be read here is left to hlp-train.
std::vector<std::string> vocabulary_warnings(const Sweep& sweep);

// (Re)builds sweep.shapes from sweep.configs: one per rank count, ascending.
void group_shapes(Sweep& sweep);

// The text of the per-task INI file hlp-train reads with --config.
std::string config_ini(const Sweep& sweep, const Config& config, const std::string& job_path);

}  // namespace hlp::sweep
