#include "model/hf/names.h"

#include <cctype>
#include <vector>

namespace hlp::model::hf {
namespace {

struct Rule {
  const char* hf;   // "{N}" = layer index
  const char* hlp;
};

// The table of names.h, in one place.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      {"model.embed_tokens.", "embed_tokens."},
      {"model.norm.", "final_norm."},
      {"lm_head.", "lm_head."},
      {"model.layers.{N}.input_layernorm.", "blocks.{N}.mixer_norm."},
      {"model.layers.{N}.post_attention_layernorm.", "blocks.{N}.mlp_norm."},
      {"model.layers.{N}.self_attn.", "blocks.{N}.mixer."},
      {"model.layers.{N}.mlp.", "blocks.{N}.mlp."},
  };
  return table;
}

// If `name` (with a trailing '.' appended, so module names match too) starts with `from`
// ({N} matching digits), returns `to` with the same N followed by the rest; else "".
std::string rewrite(const std::string& name, const std::string& from, const std::string& to) {
  const std::string text = name + ".";
  const size_t hole = from.find("{N}");
  std::string layer;
  size_t pos = 0;
  if (hole == std::string::npos) {
    if (text.compare(0, from.size(), from) != 0) return "";
    pos = from.size();
  } else {
    if (text.compare(0, hole, from, 0, hole) != 0) return "";
    size_t i = hole;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) layer += text[i++];
    if (layer.empty()) return "";
    const std::string tail = from.substr(hole + 3);
    if (text.compare(i, tail.size(), tail) != 0) return "";
    pos = i + tail.size();
  }
  std::string out = to;
  const size_t to_hole = out.find("{N}");
  if (to_hole != std::string::npos) out.replace(to_hole, 3, layer);
  out += text.substr(pos);
  out.pop_back();  // the '.' appended above
  return out;
}

}  // namespace

std::string hf_name_of(const std::string& hlp_name) {
  for (const auto& r : rules())
    if (auto out = rewrite(hlp_name, r.hlp, r.hf); !out.empty()) return out;
  return "";
}

std::string hlp_name_of(const std::string& hf_name) {
  for (const auto& r : rules())
    if (auto out = rewrite(hf_name, r.hf, r.hlp); !out.empty()) return out;
  return "";
}

std::string peft_name_of(const std::string& hlp_adapter_name) {
  for (const char* factor : {".lora_A", ".lora_B"}) {
    const std::string f = factor;
    if (hlp_adapter_name.size() > f.size() &&
        hlp_adapter_name.compare(hlp_adapter_name.size() - f.size(), f.size(), f) == 0) {
      const std::string module = hf_name_of(hlp_adapter_name.substr(0, hlp_adapter_name.size() - f.size()));
      if (module.empty()) return "";
      return "base_model.model." + module + f + ".weight";
    }
  }
  return "";
}

}  // namespace hlp::model::hf
