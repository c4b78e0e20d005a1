#include "model/hf/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/printable.h"

namespace fs = std::filesystem;

namespace hlp::model::hf {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "a, b, c and 12 more"; the items are tensor and file names read from the checkpoint.
std::string first_few(const std::vector<std::string>& items, size_t few = 5) {
  std::ostringstream os;
  for (size_t i = 0; i < items.size() && i < few; ++i)
    os << (i ? ", " : "") << printable(items[i]);
  if (items.size() > few) os << " and " << items.size() - few << " more";
  return os.str();
}

}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& path) : path_(path) {
  std::vector<std::string> file_paths;
  std::string index;
  if (fs::is_directory(path)) {
    for (const char* name : {"model.safetensors.index.json", "adapter_model.safetensors",
                             "model.safetensors"}) {
      const fs::path candidate = fs::path(path) / name;
      if (!fs::exists(candidate)) continue;
      if (ends_with(name, ".json")) index = candidate.string();
      else file_paths.push_back(candidate.string());
      break;
    }
    if (index.empty() && file_paths.empty())
      throw user_error("'", path, "' holds no model.safetensors.index.json, model.safetensors or "
                       "adapter_model.safetensors");
  } else if (ends_with(path, ".json")) {
    index = path;
  } else if (ends_with(path, ".safetensors")) {
    file_paths.push_back(path);
  } else {
    throw user_error("'", path, "' is not a directory, a .safetensors file or a "
                     "model.safetensors.index.json");
  }
  std::map<std::string, std::string> index_map;  // tensor -> shard file (sharded checkpoints)
  if (!index.empty()) {
    std::ifstream in(index, std::ios::binary);
    if (!in) throw user_error("cannot read '", index, "'");
    std::stringstream text;
    text << in.rdbuf();
    index_map = parse_safetensors_index(text.str(), index);
    std::set<std::string> shards;
    for (const auto& [tensor, file] : index_map) shards.insert(file);
    std::vector<std::string> missing;
    const fs::path dir = fs::path(index).parent_path();
    for (const auto& f : shards) {
      if (!fs::exists(dir / f)) missing.push_back(f);
      file_paths.push_back((dir / f).string());
    }
    if (!missing.empty())
      throw user_error("'", index, "' names ", missing.size(), " shard file(s) that do not exist in ",
                       dir.string(), ": ", first_few(missing));
  }
  for (const auto& fp : file_paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(fp));
    for (const auto& [name, e] : files_.back()->entries()) {
      if (where_.count(name))
        throw user_error("tensor '", printable(name), "' is in two files of '", path, "': ",
                         files_[where_[name]]->path(), " and ", fp);
      where_[name] = files_.size() - 1;
    }
  }
  if (!index_map.empty()) {
    std::vector<std::string> absent;
    for (const auto& [tensor, file] : index_map)
      if (!where_.count(tensor) ||
          fs::path(files_[where_[tensor]]->path()).filename() != fs::path(file).filename())
        absent.push_back(tensor + " (in " + file + ")");
    if (!absent.empty())
      throw user_error("'", index, "' lists ", absent.size(),
                       " tensor(s) that are not in the named shard: ", first_few(absent));
  }
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const TensorEntry& HfCheckpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw user_error("checkpoint '", path_, "' has no tensor '", name, "'");
  return files_[it->second]->entry(name);
}

void HfCheckpoint::read_region(const std::string& name, const Region& region,
                               torch::Tensor& dest) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw user_error("checkpoint '", path_, "' has no tensor '", name, "'");
  files_[it->second]->read_region(name, region, dest);
}

int64_t check_against(const HfCheckpoint& ckpt, const std::vector<ExpectedTensor>& expected,
                      const std::vector<std::string>& ignorable, const std::string& what) {
  std::vector<std::string> missing, wrong_shape, wrong_dtype, unexpected;
  std::set<std::string> known;
  std::vector<std::string> ignored_prefixes;
  for (const auto& name : ignorable) {
    if (name.size() >= 2 && name.compare(name.size() - 2, 2, ".*") == 0)
      ignored_prefixes.push_back(name.substr(0, name.size() - 1));  // keeps the '.'
    else
      known.insert(name);
  }
  int64_t ignored = 0;
  for (const auto& e : expected) {
    known.insert(e.file_name);
    if (!ckpt.has(e.file_name)) {
      missing.push_back(e.file_name);
      continue;
    }
    const TensorEntry& te = ckpt.entry(e.file_name);
    if (te.shape != e.shape)
      wrong_shape.push_back(e.file_name + " " + shape_text(te.shape) + " (expected " +
                            shape_text(e.shape) + ")");
    if (te.dtype != "F32" && te.dtype != "BF16" && te.dtype != "F16" && te.dtype != "F64")
      wrong_dtype.push_back(e.file_name + " " + te.dtype);
  }
  std::set<std::string> expected_names;
  for (const auto& e : expected) expected_names.insert(e.file_name);
  for (const auto& name : ckpt.names()) {
    if (known.count(name)) {
      ignored += expected_names.count(name) ? 0 : 1;
      continue;
    }
    bool prefixed = false;
    for (const auto& prefix : ignored_prefixes)
      prefixed = prefixed || name.compare(0, prefix.size(), prefix) == 0;
    if (prefixed) ++ignored;
    else unexpected.push_back(name);
  }
  if (missing.empty() && wrong_shape.empty() && wrong_dtype.empty() && unexpected.empty())
    return ignored;
  std::ostringstream os;
  os << what << " '" << ckpt.path() << "' does not match the model config:";
  if (!missing.empty()) os << " missing " << missing.size() << ": " << first_few(missing) << ";";
  if (!wrong_shape.empty())
    os << " wrong shape " << wrong_shape.size() << ": " << first_few(wrong_shape) << ";";
  if (!wrong_dtype.empty())
    os << " unreadable dtype " << wrong_dtype.size() << " (HLP reads BF16, F16, F32, F64): "
       << first_few(wrong_dtype) << ";";
  if (!unexpected.empty())
    os << " unexpected " << unexpected.size() << ": " << first_few(unexpected) << ";";
  os << " (is --model-config the config.json of this checkpoint?)";
  throw UserError(os.str());
}

int64_t load_held(const HfCheckpoint& ckpt, const std::vector<ExpectedTensor>& expected,
                  const std::vector<HeldTensor>& held) {
  std::map<std::string, const ExpectedTensor*> by_hlp;
  for (const auto& e : expected) by_hlp[e.hlp_name] = &e;
  torch::NoGradGuard no_grad;
  int64_t bytes = 0;
  for (const auto& h : held) {
    auto it = by_hlp.find(h.name);
    if (it == by_hlp.end()) continue;  // e.g. LoRA factors when loading base weights
    torch::Tensor dest = h.local.detach();
    ckpt.read_region(it->second->file_name, h.region, dest);
    if (it->second->offset != 0.0) dest.add_(it->second->offset);
    bytes += dest.nbytes();
  }
  return bytes;
}

}  // namespace hlp::model::hf
