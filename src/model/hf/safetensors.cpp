#include "model/hf/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"

namespace hlp::model::hf {

using json = nlohmann::json;

Region Region::whole(const std::vector<int64_t>& shape) {
  return Region{std::vector<int64_t>(shape.size(), 0), shape};
}

Region Region::narrowed(int64_t dim, int64_t start, int64_t length) const {
  Region r = *this;
  r.begin.at(size_t(dim)) += start;
  r.size.at(size_t(dim)) = length;
  return r;
}

int64_t Region::numel() const {
  int64_t n = 1;
  for (int64_t s : size) n *= s;
  return n;
}

namespace {

// Converts `count` stored elements at `src` to float32 at `dst`.
void to_float(const std::string& dtype, const uint8_t* src, float* dst, int64_t count) {
  if (dtype == "F32") {
    std::memcpy(dst, src, size_t(count) * 4);
  } else if (dtype == "BF16") {  // exact: bf16 is the top half of a float32
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      const uint32_t wide = uint32_t(bits) << 16;
      std::memcpy(dst + i, &wide, 4);
    }
  } else if (dtype == "F16") {
    for (int64_t i = 0; i < count; ++i) {
      c10::Half h;
      std::memcpy(&h.x, src + 2 * i, 2);
      dst[i] = static_cast<float>(h);
    }
  } else {  // F64 (checked by the caller)
    for (int64_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<float>(v);
    }
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  try {
    open_and_validate();
  } catch (...) {  // the destructor does not run for a constructor that throws
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
}

void SafetensorsFile::open_and_validate() {
  const std::string& path = path_;
  fd_ = ::open(path.c_str(), O_RDONLY);
  if (fd_ < 0) throw user_error("cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd_, &st);
  map_bytes_ = size_t(st.st_size);
  if (map_bytes_ < 8)
    throw user_error("safetensors file '", path, "' is truncated: ", map_bytes_,
                     " bytes, shorter than the 8-byte header length");
  void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) throw user_error("cannot map '", path, "': ", std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);

  SafetensorsHeader header = parse_safetensors_header(map_, map_bytes_, path);
  data_start_ = header.data_start;
  entries_ = std::move(header.entries);
  metadata_ = std::move(header.metadata);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw user_error("safetensors file '", path_, "' has no tensor '", printable(name), "'");
  return it->second;
}

void SafetensorsFile::read_region(const std::string& name, const Region& region,
                                  torch::Tensor& dest) const {
  const TensorEntry& e = entry(name);
  const bool is_int = e.dtype == "I64";
  if (!(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16" || e.dtype == "F64" || is_int))
    throw user_error("safetensors file '", path_, "': '", name, "' is stored as ", e.dtype,
                     "; HLP reads BF16, F16, F32 and F64 weights");
  const size_t dims = e.shape.size();
  if (region.begin.size() != dims || region.size.size() != dims)
    throw user_error("'", name, "' has ", dims, " dimensions, a region of ", region.size.size(),
                     " was asked for");
  for (size_t d = 0; d < dims; ++d)
    if (region.begin[d] < 0 || region.size[d] < 0 || region.begin[d] + region.size[d] > e.shape[d])
      throw user_error("'", name, "': region outside its shape ", shape_text(e.shape));
  TORCH_CHECK(dest.is_contiguous() && dest.numel() == region.numel(),
              "read_region: destination must be contiguous with the region's element count");
  if (is_int) TORCH_CHECK(dest.scalar_type() == torch::kLong, "I64 tensors read into int64 only");

  // The stored bits are copied as they are when the destination has the stored dtype (int64,
  // float32, and BF16 / F16 into a bf16 / fp16 frozen weight: no float32 copy on the way);
  // otherwise they are widened to float32. Host staging only when the destination is not such
  // a CPU tensor already; a GPU destination gets the region through a host buffer and one copy.
  const torch::ScalarType stored = is_int              ? torch::kLong
                                   : e.dtype == "BF16" ? torch::kBFloat16
                                   : e.dtype == "F16"  ? torch::kHalf
                                   : e.dtype == "F64"  ? torch::kDouble
                                                       : torch::kFloat;
  const bool raw = dest.scalar_type() == stored;
  const bool direct = dest.device().is_cpu() && (raw || dest.scalar_type() == torch::kFloat);
  torch::Tensor out = direct ? dest : torch::empty({region.numel()}, raw ? stored : torch::kFloat);
  const int64_t elem = safetensors_dtype_size(e.dtype);
  const uint8_t* base = map_ + data_start_ + e.begin;
  // Row-major strides of the stored tensor, in elements.
  std::vector<int64_t> stride(dims, 1);
  for (size_t d = dims; d-- > 1;) stride[d - 1] = stride[d] * e.shape[d];
  const int64_t run = dims == 0 ? 1 : region.size[dims - 1];  // contiguous elements per row
  const int64_t runs = run == 0 ? 0 : region.numel() / run;
  std::vector<int64_t> index(dims == 0 ? 0 : dims - 1, 0);  // position among the leading dims
  uint8_t* out_bytes = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = dims == 0 ? 0 : region.begin[dims - 1];
    for (size_t d = 0; d + 1 < dims; ++d) offset += (region.begin[d] + index[d]) * stride[d];
    const uint8_t* src = base + offset * elem;
    if (raw)
      std::memcpy(out_bytes + r * run * elem, src, size_t(run * elem));
    else
      to_float(e.dtype, src, reinterpret_cast<float*>(out_bytes) + r * run, run);
    for (size_t d = index.size(); d-- > 0;) {  // odometer over the leading dims
      if (++index[d] < region.size[d]) break;
      index[d] = 0;
    }
  }
  if (!out.is_same(dest)) dest.view({-1}).copy_(out);
}

torch::Tensor SafetensorsFile::read(const std::string& name, torch::ScalarType dtype) const {
  const TensorEntry& e = entry(name);
  torch::Tensor t = torch::empty(e.shape, e.dtype == "I64" ? torch::kLong : dtype);
  read_region(name, Region::whole(e.shape), t);
  return t;
}

namespace {

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "F32";
    case torch::kBFloat16: return "BF16";
    case torch::kHalf: return "F16";
    case torch::kDouble: return "F64";
    case torch::kLong: return "I64";
    default: throw user_error("write_safetensors: unsupported dtype ", c10::toString(t));
  }
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, torch::Tensor>> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace_back(name, t.detach().cpu().contiguous());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    const uint64_t bytes = uint64_t(t.nbytes());
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data start 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw user_error("cannot write '", path, "'");
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& [name, t] : sorted)
      out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.nbytes()));
    if (!out) throw user_error("cannot write '", path, "' (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace hlp::model::hf
