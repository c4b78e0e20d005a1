#pragma once
// safetensors files, read and written by HLP itself (no Python, no third-party reader). The
// format and its validation: safetensors_header.h.
//
// SafetensorsFile memory-maps the file and validates the header completely at open (offsets
// inside the file, sizes = numel x dtype size, no overlaps, data ends at the file's end): a
// corrupted or truncated file is one UserError naming the file and what is wrong. Reading a
// region touches only the bytes of that region (read_region), so a rank that holds one FSDP2
// shard or TP slice pages in only those rows / columns.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/hf/safetensors_header.h"

namespace hlp::model::hf {

// A hyper-rectangle of a tensor: per dimension [begin, begin + size).
struct Region {
  std::vector<int64_t> begin;
  std::vector<int64_t> size;
  static Region whole(const std::vector<int64_t>& shape);
  // The region narrowed again on `dim` (offsets relative to this region).
  Region narrowed(int64_t dim, int64_t start, int64_t length) const;
  int64_t numel() const;
  bool operator==(const Region& o) const { return begin == o.begin && size == o.size; }
};

class SafetensorsFile {
 public:
  // Maps and validates; throws hlp::UserError naming `path` and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  const TensorEntry& entry(const std::string& name) const;

  // Copies `region` of tensor `name` into `dest` (contiguous, region.size elements, float32 /
  // float64 / bfloat16 / float16), converting from the stored dtype (BF16, F16, F32, F64).
  // Only the bytes of the region are read. Throws UserError for an unsupported dtype.
  void read_region(const std::string& name, const Region& region, torch::Tensor& dest) const;
  // The whole tensor as a new tensor of `dtype`.
  torch::Tensor read(const std::string& name, torch::ScalarType dtype = torch::kFloat) const;

 private:
  void open_and_validate();

  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, TensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (name, contiguous CPU tensor of float32 / bfloat16 / float16 / int64) in
// name order, with optional __metadata__. Writes to PATH.tmp then renames.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hlp::model::hf
