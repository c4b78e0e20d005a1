#pragma once
// Small RAII and attribute helpers over the HDF5 C API, shared by the writer and the reader.
// Every failure becomes hlp::UserError naming what was being done (HDF5's own error stack
// printing is switched off by silence_hdf5_errors()).
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hlp::metrics::h5 {

// Owns one hid_t and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }
  // Forgets the id without closing it (see ResultWriter's destructor).
  void release() { id_ = -1; }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }  // NOLINT: pass straight to the C API

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Throw when id < 0, returns id otherwise: hlp::IoError("<what>: No space left on device
// (ENOSPC)") when HDF5's error stack quotes an OS reason, UserError("<what>: HDF5 call failed")
// otherwise.
hid_t check(hid_t id, const std::string& what);
void check_status(herr_t status, const std::string& what);

Handle file(hid_t id, const std::string& what);
Handle group(hid_t id, const std::string& what);
Handle dataset(hid_t id, const std::string& what);
Handle space(hid_t id, const std::string& what);
Handle type(hid_t id, const std::string& what);
Handle plist(hid_t id, const std::string& what);
Handle attribute(hid_t id, const std::string& what);

void silence_hdf5_errors();
// HDF5's error stack of the last failed call, innermost last, as one line ("func: desc; ...").
std::string error_stack_text();
std::string hdf5_version();

// UTF-8 variable-length string type (h5py reads it as str).
Handle vlen_string_type();

// ---- attributes on any object (replaces an existing attribute of the same name) ----
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, double value);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values);

bool has_attr(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name);
double read_attr_double(hid_t obj, const std::string& name);
std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name);
std::vector<double> read_attr_doubles(hid_t obj, const std::string& name);

bool link_exists(hid_t loc, const std::string& path);  // every component checked

}  // namespace hlp::metrics::h5
