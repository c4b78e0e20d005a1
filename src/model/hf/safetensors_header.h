#pragma once
// The metadata of a safetensors checkpoint, parsed and validated without LibTorch (part of
// hlp_model_config, so that a fuzzer can run it on arbitrary bytes): a file's JSON header and
// the sharded checkpoint's model.safetensors.index.json. SafetensorsFile (safetensors.h) maps a
// file and reads tensors on top of parse_safetensors_header().
//
// Format (docs/formats.md, "safetensors"): u64 little-endian header length N, N bytes of JSON
// (may end in spaces), then the raw data. Header entries: "name": {"dtype":
// "BF16"|"F16"|"F32"|..., "shape": [...], "data_offsets": [begin, end]} relative to the data
// start, optional "__metadata__" (string -> string). Row-major, no strides.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hlp::model::hf {

struct TensorEntry {
  std::string dtype;  // safetensors spelling: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data start
};

struct SafetensorsHeader {
  size_t data_start = 0;  // 8 + header length: file offset of data byte 0
  std::map<std::string, TensorEntry> entries;
  std::map<std::string, std::string> metadata;
};

// Validates the whole layout of a safetensors file of `file_bytes` bytes at `bytes`: header
// length inside the file, JSON object, known dtypes, sizes = numel x dtype size without
// overflow, data_offsets inside the file, no overlaps or gaps, data ending at the file's end.
// Throws hlp::UserError naming `path` and the problem.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t file_bytes,
                                           const std::string& path);

// Bytes per element of a safetensors dtype, or 0 for one HLP does not read.
int64_t safetensors_dtype_size(const std::string& dtype);

// "[2, 3]"
std::string shape_text(const std::vector<int64_t>& shape);

// The "weight_map" (tensor name -> shard file name) of a model.safetensors.index.json's text.
// Shard names must be plain file names: the shards lie beside the index. Throws hlp::UserError
// naming `path`.
std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& path);

}  // namespace hlp::model::hf
