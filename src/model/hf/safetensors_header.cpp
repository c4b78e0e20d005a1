#include "model/hf/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "common/error.h"
#include "common/printable.h"

namespace hlp::model::hf {

using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // upstream's cap

// A JSON array of whole numbers. nlohmann converts a float element with a plain cast (undefined
// behaviour out of range: 1e22 as int64), and 2.5 is neither a dimension nor an offset.
template <typename Int>
std::vector<Int> whole_numbers(const json& v, const char* what) {
  if (!v.is_array()) throw std::runtime_error(std::string(what) + " is not an array");
  for (const json& x : v)
    if (!x.is_number_integer())
      throw std::runtime_error(std::string(what) + " holds " + x.dump() + ", not a whole number");
  return v.get<std::vector<Int>>();
}

}  // namespace

int64_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "BF16" || d == "F16" || d == "I16" || d == "U16") return 2;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t file_bytes,
                                           const std::string& path) {
  if (file_bytes < 8)
    throw user_error("safetensors file '", path, "' is truncated: ", file_bytes,
                     " bytes, shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes)
    throw user_error("safetensors file '", path, "' has a corrupted header: header length ",
                     header_bytes, " exceeds the format's limit of ", kMaxHeaderBytes, " bytes");
  if (8 + header_bytes > file_bytes)
    throw user_error("safetensors file '", path, "' is truncated: the header needs ",
                     8 + header_bytes, " bytes, the file has ", file_bytes);
  SafetensorsHeader out;
  out.data_start = 8 + size_t(header_bytes);
  const size_t data_bytes = file_bytes - out.data_start;

  json header;
  try {
    header = json::parse(bytes + 8, bytes + out.data_start);
  } catch (const json::exception& e) {
    // nlohmann quotes the bytes it last read: they may be anything (printable()).
    throw user_error("safetensors file '", path, "' has a corrupted header (not JSON: ",
                     printable(e.what()), ")");
  }
  if (!header.is_object())
    throw user_error("safetensors file '", path, "' has a corrupted header (not a JSON object)");
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (value.is_object())
        for (auto& [k, v] : value.items())
          if (v.is_string()) out.metadata[k] = v.get<std::string>();
      continue;
    }
    TensorEntry e;
    try {
      e.dtype = value.at("dtype").get<std::string>();
      e.shape = whole_numbers<int64_t>(value.at("shape"), "shape");
      const auto offsets = whole_numbers<uint64_t>(value.at("data_offsets"), "data_offsets");
      if (offsets.size() != 2) throw std::runtime_error("data_offsets needs two numbers");
      e.begin = offsets[0];
      e.end = offsets[1];
    } catch (const std::exception& ex) {
      throw user_error("safetensors file '", path, "' has a corrupted header: entry '",
                       printable(name), "': ", printable(ex.what()));
    }
    const int64_t elem = safetensors_dtype_size(e.dtype);
    if (elem == 0)
      throw user_error("safetensors file '", path, "': '", printable(name), "' has unknown dtype '",
                       printable(e.dtype), "'");
    // Checked: a hostile shape must not wrap around to the byte count of its data_offsets.
    int64_t tensor_bytes = elem;
    for (int64_t s : e.shape) {
      if (s < 0)
        throw user_error("safetensors file '", path, "' has a corrupted header: '", printable(name),
                         "' has a negative dimension in shape ", shape_text(e.shape));
      if (__builtin_mul_overflow(tensor_bytes, s, &tensor_bytes))
        throw user_error("safetensors file '", path, "' has a corrupted header: '", printable(name),
                         "' has shape ", shape_text(e.shape), ", over 2^63 bytes");
    }
    if (e.end < e.begin || e.end - e.begin != uint64_t(tensor_bytes))
      throw user_error("safetensors file '", path, "' has a corrupted header: '", printable(name),
                       "' (", e.dtype, " ", shape_text(e.shape), ") needs ", tensor_bytes,
                       " bytes but data_offsets span [", e.begin, ", ", e.end, ")");
    if (e.end > data_bytes)
      throw user_error("safetensors file '", path, "' is truncated: '", printable(name),
                       "' ends at data byte ", e.end, " but the file holds only ", data_bytes,
                       " data bytes");
    spans.emplace_back(e.begin, e.end);
    out.entries.emplace(name, std::move(e));
  }
  std::sort(spans.begin(), spans.end());
  uint64_t expected = 0;
  for (const auto& [b, e] : spans) {
    if (b != expected)
      throw user_error("safetensors file '", path, "' has a corrupted header: tensor data ",
                       b < expected ? "overlaps" : "has a gap", " at data byte ", b);
    expected = e;
  }
  if (expected != data_bytes)
    throw user_error("safetensors file '", path, "' has ", data_bytes - expected,
                     " bytes after the last tensor (corrupted header or wrong file)");
  return out;
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& path) {
  std::map<std::string, std::string> weight_map;
  try {
    const json j = json::parse(json_text.begin(), json_text.end());
    const json& map = j.at("weight_map");
    if (!map.is_object()) throw std::runtime_error("\"weight_map\" is not an object");
    for (auto& [tensor, file] : map.items()) weight_map[tensor] = file.get<std::string>();
  } catch (const std::exception& e) {
    throw user_error("'", path, "' is not a safetensors index (needs a \"weight_map\" of "
                     "tensor -> file): ", printable(e.what()));
  }
  for (const auto& [tensor, file] : weight_map)
    if (file.empty() || file == "." || file == ".." ||
        file.find_first_of(std::string("/\0", 2)) != std::string::npos)
      throw user_error("'", path, "' maps '", printable(tensor), "' to '", printable(file),
                       "', which is not a file name; shards must lie beside the index");
  return weight_map;
}

}  // namespace hlp::model::hf
