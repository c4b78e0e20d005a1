#include "data/hf_tokenizer_json.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "data/unicode_text.h"

namespace hlp::data {
namespace {

using nlohmann::json;

// The regex of Hugging Face's ByteLevel pre-tokenizer when use_regex is true (GPT-2's).
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// Collects everything wrong with one file into messages that name it and the component.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw user_error("--tokenizer '", path_, "': ", parts...);
  }
  template <typename... Parts>
  void unsupported(const Parts&... parts) const {
    fail(parts..., " is not supported (HLP implements the byte-level BPE of GPT-2 / Qwen2 / "
                   "Qwen3 tokenizer.json files; src/data/README.md lists the subset)");
  }
  // obj[key] as a bool, false when absent or null.
  bool flag(const json& obj, const char* key) const {
    if (!obj.contains(key) || obj[key].is_null()) return false;
    if (!obj[key].is_boolean()) fail("\"", key, "\" is not a boolean");
    return obj[key].get<bool>();
  }
  // The component's type, printable(): it is only compared with names and quoted in messages.
  std::string type_of(const json& obj, const char* what) const {
    if (!obj.is_object() || !obj.contains("type") || !obj["type"].is_string())
      fail(what, " has no \"type\"");
    return printable(obj["type"].get<std::string>());
  }

 private:
  std::string path_;
};

void read_pre_tokenizer(const json& pre, const Checker& check, HfBpeSpec& spec) {
  if (pre.is_null()) check.unsupported("pre_tokenizer null (byte-level BPE needs ByteLevel)");
  auto byte_level = [&](const json& p, bool want_regex) {
    if (check.flag(p, "add_prefix_space")) check.unsupported("pre_tokenizer ByteLevel with add_prefix_space true");
    const bool use_regex = !p.contains("use_regex") || p["use_regex"].is_null() || check.flag(p, "use_regex");
    if (use_regex != want_regex)
      check.unsupported("pre_tokenizer ByteLevel with use_regex ", use_regex ? "true" : "false",
                        want_regex ? " alone" : " after a Split");
  };
  const std::string type = check.type_of(pre, "pre_tokenizer");
  if (type == "ByteLevel") {
    byte_level(pre, true);
    spec.split_regex = kGpt2Regex;
    return;
  }
  if (type != "Sequence") check.unsupported("pre_tokenizer ", type);
  // (operator[] of a const object must only be asked for keys it holds)
  if (!pre.contains("pretokenizers")) check.unsupported("pre_tokenizer Sequence without \"pretokenizers\"");
  const json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2)
    check.unsupported("pre_tokenizer Sequence other than [Split, ByteLevel]");
  const json& split = steps[0];
  const std::string split_type = check.type_of(split, "pre_tokenizer Sequence[0]");
  if (split_type != "Split") check.unsupported("pre_tokenizer Sequence[0] ", split_type);
  if (!split.contains("pattern") || !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string())
    check.unsupported("pre_tokenizer Split without a Regex pattern (a String pattern)");
  if (!split.contains("behavior") || split["behavior"] != "Isolated")
    check.unsupported("pre_tokenizer Split behavior ",
                      split.contains("behavior") ? printable(split["behavior"].dump())
                                                 : std::string("(none)"),
                      " (only Isolated)");
  if (check.flag(split, "invert")) check.unsupported("pre_tokenizer Split with invert true");
  spec.split_regex = split["pattern"]["Regex"].get<std::string>();
  const std::string second = check.type_of(steps[1], "pre_tokenizer Sequence[1]");
  if (second != "ByteLevel") check.unsupported("pre_tokenizer Sequence[1] ", second);
  byte_level(steps[1], false);
}

void read_bpe_model(const json& model, const Checker& check, int64_t max_id, HfBpeSpec& spec,
                    std::unordered_map<std::string, int32_t>& ids) {
  const std::string type = check.type_of(model, "model");
  if (type != "BPE") check.unsupported("model type '", type, "'");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0)
    check.unsupported("model BPE with dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      check.unsupported("model BPE with ", key, " ", printable(model[key].dump()));
  spec.ignore_merges = check.flag(model, "ignore_merges");
  if (!model.contains("vocab") || !model["vocab"].is_object()) check.fail("model has no \"vocab\" object");
  ids.reserve(model["vocab"].size() * 2);
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > max_id)
      check.fail("vocab entry '", printable(token), "' has no valid id in [0, ", max_id, "]");
    const int32_t i = id.get<int32_t>();
    if (size_t(i) >= spec.vocab.size()) spec.vocab.resize(size_t(i) + 1);
    spec.vocab[size_t(i)] = token;
    ids[token] = i;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(byte_to_unicode()[size_t(b)]);
    if (it == ids.end())
      check.fail("vocab lacks the byte-level token for byte ", b, " ('", byte_to_unicode()[size_t(b)],
                 "'); not a byte-level BPE");
    spec.byte_ids[b] = it->second;
  }
  if (!model.contains("merges") || !model["merges"].is_array()) check.fail("model has no \"merges\" list");
  const json& merges = model["merges"];
  spec.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // older files: "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        check.fail("merges[", rank, "] '", printable(s), "' is not two tokens");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      check.fail("merges[", rank, "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    int32_t parts[3];
    const std::string merged = left + right;
    const std::string* names[3] = {&left, &right, &merged};
    for (int k = 0; k < 3; ++k) {
      auto it = ids.find(*names[k]);
      if (it == ids.end())
        check.fail("merges[", rank, "] ('", printable(left), "', '", printable(right), "') names '",
                   printable(*names[k]), "', which is not in the vocabulary");
      parts[k] = it->second;
    }
    spec.merges.push_back({parts[0], parts[1], parts[2]});
  }
}

void read_added_tokens(const json& added, const Checker& check, int64_t max_id, HfBpeSpec& spec,
                       const std::unordered_map<std::string, int32_t>& ids) {
  if (added.is_null()) return;
  if (!added.is_array()) check.fail("\"added_tokens\" is not a list");
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string() || a["content"].get<std::string>().empty())
      check.fail("an added_tokens entry lacks an id or a content: ", printable(a.dump()));
    HfAddedToken t;
    t.content = a["content"].get<std::string>();
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id > max_id)
      check.fail("added token '", printable(t.content), "' has id ", id, ", outside [0, ", max_id, "]");
    t.id = int32_t(id);
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      if (check.flag(a, key))
        check.unsupported("added token '", printable(t.content), "' with ", key, " true");
    t.special = check.flag(a, "special");
    t.normalized = check.flag(a, "normalized");
    auto known = ids.find(t.content);
    if (known != ids.end() && known->second != t.id)
      check.fail("added token '", printable(t.content), "' has id ", t.id,
                 " but the vocabulary says ", known->second);
    spec.added_tokens.push_back(t);
  }
}

}  // namespace

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[b] = utf8_of(printable ? b : next++);
    }
    return t;
  }();
  return table;
}

HfBpeSpec load_hf_bpe_spec(const std::string& path) {
  const Checker check(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) check.fail("cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  json root;
  try {
    root = json::parse(bytes);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    check.fail("not valid JSON (", printable(e.what()), "); a truncated download? fetch it again "
               "(datasets/qwen3/fetch.sh)");
  }
  if (!root.is_object()) check.fail("not a tokenizer.json (the top level is not an object)");

  HfBpeSpec spec;
  const size_t slash = path.find_last_of('/');
  spec.file_name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  spec.content_hash = hash;

  for (const char* key : {"truncation", "padding"})
    if (root.contains(key) && !root[key].is_null()) check.unsupported("\"", key, "\" (set it to null)");
  if (!root.contains("model")) check.fail("no \"model\"; not a tokenizer.json");
  const json null;
  const json& normalizer = root.contains("normalizer") ? root["normalizer"] : null;
  if (!normalizer.is_null()) {
    const std::string type = check.type_of(normalizer, "normalizer");
    if (type != "NFC") check.unsupported("normalizer ", type);
    spec.nfc = true;
  }
  read_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : null, check, spec);
  try {
    RegexSplitter compiles(spec.split_regex);
  } catch (const UserError& e) {
    check.fail(e.what());
  }
  // Ids index tables (id -> token, the model's embedding rows), so the largest is bounded by the
  // tokens the file defines: real files number them densely from 0; twice that leaves room for
  // holes, while an id of 2^30 in a small file would size a 32 GiB table.
  const json& model = root["model"];
  const json& added = root.contains("added_tokens") ? root["added_tokens"] : null;
  const size_t vocab_entries = model.is_object() && model.contains("vocab") ? model["vocab"].size() : 0;
  const int64_t max_id = 2 * int64_t(vocab_entries + (added.is_array() ? added.size() : 0));
  std::unordered_map<std::string, int32_t> ids;
  read_bpe_model(model, check, max_id, spec, ids);
  read_added_tokens(added, check, max_id, spec, ids);
  const json& post = root.contains("post_processor") ? root["post_processor"] : null;
  if (!post.is_null()) {
    const std::string post_type = check.type_of(post, "post_processor");
    if (post_type != "ByteLevel") check.unsupported("post_processor ", post_type);
  }
  const json& decoder = root.contains("decoder") ? root["decoder"] : null;
  if (decoder.is_null()) check.unsupported("decoder null (byte-level BPE needs ByteLevel)");
  const std::string decoder_type = check.type_of(decoder, "decoder");
  if (decoder_type != "ByteLevel") check.unsupported("decoder ", decoder_type);

  spec.vocab_size = int32_t(spec.vocab.size());
  for (const auto& t : spec.added_tokens) {
    spec.vocab_size = std::max(spec.vocab_size, t.id + 1);
    if (t.content == "<|endoftext|>") spec.eot_id = t.id;
  }
  if (spec.eot_id < 0) {
    auto it = ids.find("<|endoftext|>");
    if (it == ids.end()) check.fail("has no <|endoftext|> token (HLP separates documents with it)");
    spec.eot_id = it->second;
  }
  return spec;
}

}  // namespace hlp::data
