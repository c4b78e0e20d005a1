#include "model/hf/names.h"

#include <cctype>
#include <functional>
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

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "blocks.N.<rest>" -> N, or -1
int64_t block_index(const std::string& hlp_name) {
  if (!starts_with(hlp_name, "blocks.")) return -1;
  size_t i = 7;
  int64_t n = 0;
  if (i >= hlp_name.size() || !std::isdigit(static_cast<unsigned char>(hlp_name[i]))) return -1;
  while (i < hlp_name.size() && std::isdigit(static_cast<unsigned char>(hlp_name[i])))
    n = n * 10 + (hlp_name[i++] - '0');
  return n;
}

std::string peft_of(const std::string& hlp_adapter_name,
                    const std::function<std::string(const std::string&)>& module_name) {
  for (const char* factor : {".lora_A", ".lora_B"}) {
    const std::string f = factor;
    if (hlp_adapter_name.size() > f.size() && ends_with(hlp_adapter_name, f)) {
      const std::string module = module_name(hlp_adapter_name.substr(0, hlp_adapter_name.size() - f.size()));
      if (module.empty()) return "";
      return "base_model.model." + module + f + ".weight";
    }
  }
  return "";
}

}  // namespace

std::string peft_name_of(const std::string& hlp_adapter_name) {
  return peft_of(hlp_adapter_name, [](const std::string& m) { return hf_name_of(m); });
}

std::string hf_name_of(const std::string& hlp_name, const ModelConfig& config) {
  std::string out = hf_name_of(hlp_name);
  if (out.empty() || config.hf_layout == HfLayout::standard) return out;
  const int64_t block = block_index(hlp_name);
  const std::string self_attn = "model.layers." + std::to_string(block) + ".self_attn.";
  if (block >= 0 && block < config.num_layers() &&
      config.layer_kind(block) == LayerKind::gated_delta && starts_with(out, self_attn))
    out = "model.layers." + std::to_string(block) + ".linear_attn." + out.substr(self_attn.size());
  if (config.hf_layout == HfLayout::qwen3_5_vl && starts_with(out, "model."))
    out = "model.language_model." + out.substr(6);
  return out;
}

std::string peft_name_of(const std::string& hlp_adapter_name, const ModelConfig& config) {
  return peft_of(hlp_adapter_name, [&](const std::string& m) { return hf_name_of(m, config); });
}

double hf_value_offset(const std::string& hlp_name, const ModelConfig& config) {
  if (!config.norm_zero_centred || !ends_with(hlp_name, "norm.weight")) return 0.0;
  // the G layers' gated norm (blocks.N.mixer.norm.weight) is a plain RMSNorm
  const int64_t block = block_index(hlp_name);
  if (block >= 0 && block < config.num_layers() &&
      config.layer_kind(block) == LayerKind::gated_delta &&
      hlp_name == "blocks." + std::to_string(block) + ".mixer.norm.weight")
    return 0.0;
  return 1.0;
}

}  // namespace hlp::model::hf
