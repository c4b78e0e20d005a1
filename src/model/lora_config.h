#pragma once
// LoraConfig: which projections get LoRA adapters, and which other modules stay trainable.
// Plain data, no LibTorch, so that the accounting (accounting.h) and apply_lora (lora.h) select
// exactly the same parameters by the same names.
//
// Target selection follows PEFT: a target "q_proj" matches every module whose full name is
// "q_proj" or ends with ".q_proj" (e.g. "blocks.3.mixer.q_proj"); "mixer.q_proj" works too.
// A targets string "re:REGEX" instead selects the modules whose full name matches REGEX
// entirely (std::regex_match, like PEFT's re.fullmatch). "all-linear" selects every projection.
#include <cstdint>
#include <string>
#include <vector>

namespace hlp::model {

struct LoraConfig {
  int64_t rank = 8;  // r; 0 = full finetune (no adapters, every parameter trainable)
  double alpha = 8.0;
  double dropout = 0.0;  // on the adapter input only
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  std::string targets_regex;  // non-empty: used instead of `targets`
  bool all_linear = false;    // every projection (q,k,v,o,g,a,b,gate,up,down)
  // Modules that stay trainable next to the adapters (PEFT's modules_to_save), matched by the
  // same suffix rule on module names: e.g. {"embed_tokens", "mixer_norm", "mlp_norm", "final_norm"}.
  std::vector<std::string> modules_to_save;

  bool full_finetune() const { return rank == 0; }
  double scale() const { return alpha / static_cast<double>(rank); }  // alpha / r

  bool targets_module(const std::string& module_name) const;  // module gets an adapter?
  bool saves_module(const std::string& module_name) const;    // module stays trainable?
  // A non-adapter parameter stays trainable when its module or any enclosing module is saved
  // ("blocks.3.mixer.A_log" is saved by "mixer", "blocks.3" or "A_log"'s module "blocks.3.mixer").
  bool saves_parameter(const std::string& param_name) const;
  void validate() const;                                      // UserError on bad values

  static LoraConfig none() {  // full finetune
    LoraConfig c;
    c.rank = 0;
    return c;
  }
};

// From CLI strings: targets "q_proj,k_proj" | "re:REGEX" | "all-linear".
LoraConfig make_lora_config(int64_t rank, double alpha, double dropout,
                            const std::string& targets,
                            const std::string& modules_to_save = "");

// True when `name` equals `suffix` or ends with "." + suffix.
bool name_has_suffix(const std::string& name, const std::string& suffix);

std::vector<std::string> split_comma_list(const std::string& text);

}  // namespace hlp::model
