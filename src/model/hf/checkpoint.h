#pragma once
// A Hugging Face checkpoint on disk (--init-from, --load-adapter): a directory with
// model.safetensors.index.json (sharded) or model.safetensors / adapter_model.safetensors, a
// .safetensors file, or a model.safetensors.index.json file. Every file is mapped and its header
// validated at open; tensors are then read by name and region (only those bytes are touched).
//
// load_held() is the one entry point the strategies' holdings go through:
//   1. check_against(): the checkpoint's tensors vs the names and shapes the model expects —
//      missing, unexpected, wrongly shaped or unreadable (dtype) tensors are ONE UserError that
//      lists up to 5 of each and then a count. Every rank runs the same check on the headers
//      alone, so every rank fails alike.
//   2. each HeldTensor's region is read into its `local` tensor, converted to its dtype.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/hf/held_tensor.h"
#include "model/hf/safetensors.h"

namespace hlp::model::hf {

class HfCheckpoint {
 public:
  explicit HfCheckpoint(const std::string& path);  // throws UserError (missing shard, ...)

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // every tensor, sorted
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  const TensorEntry& entry(const std::string& name) const;
  void read_region(const std::string& name, const Region& region, torch::Tensor& dest) const;
  size_t file_count() const { return files_.size(); }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// An expected tensor: HF name in the checkpoint, its HLP name and whole shape.
struct ExpectedTensor {
  std::string file_name;
  std::string hlp_name;
  std::vector<int64_t> shape;
  double offset = 0.0;  // HLP holds the file's value + offset (names.h, hf_value_offset)
};

// One UserError for every mismatch (see above). `ignorable` names may be present without being
// expected (lm_head.weight of a tied model; a name ending in ".*" is a prefix: model.visual.* of
// a vision-language checkpoint). `what` names the checkpoint's role in messages. Returns how
// many of the checkpoint's tensors were ignored.
int64_t check_against(const HfCheckpoint& checkpoint, const std::vector<ExpectedTensor>& expected,
                      const std::vector<std::string>& ignorable, const std::string& what);

// Reads the regions of `held` whose HLP name is expected; returns the bytes written.
int64_t load_held(const HfCheckpoint& checkpoint, const std::vector<ExpectedTensor>& expected,
                  const std::vector<HeldTensor>& held);

}  // namespace hlp::model::hf
