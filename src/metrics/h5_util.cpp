#include "metrics/h5_util.h"

#include "common/error.h"
#include "common/os_error.h"
#include "common/printable.h"

namespace hlp::metrics::h5 {

std::string error_stack_text() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto& o = *static_cast<std::string*>(data);
        if (!o.empty()) o += "; ";
        o += std::string(e->func_name ? e->func_name : "?") + ": " + (e->desc ? e->desc : "");
        return 0;
      },
      &out);
  return out;
}

namespace {

// A failed call: IoError with the OS reason when HDF5's error stack quotes one (the sec2 and
// MPI-IO drivers both put strerror()'s text there), UserError otherwise. Clears the stack.
[[noreturn]] void throw_failure(const std::string& what) {
  const std::string stack = error_stack_text();
  const int err = find_errno_in_text(stack);
  H5Eclear2(H5E_DEFAULT);
  if (err != 0) throw IoError(what + ": " + os_error_text(err), err);
  // the innermost entry says most ("file signature not found", "addr overflow ...")
  const size_t last = stack.rfind("; ");
  const std::string inner = last == std::string::npos ? stack : stack.substr(last + 2);
  if (inner.empty()) throw user_error(what, ": HDF5 call failed");
  throw user_error(what, ": HDF5 call failed (", printable(inner), ")");
}

}  // namespace

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) throw_failure(what);
  return id;
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) throw_failure(what);
}

Handle file(hid_t id, const std::string& what) { return {check(id, what), H5Fclose}; }
Handle group(hid_t id, const std::string& what) { return {check(id, what), H5Gclose}; }
Handle dataset(hid_t id, const std::string& what) { return {check(id, what), H5Dclose}; }
Handle space(hid_t id, const std::string& what) { return {check(id, what), H5Sclose}; }
Handle type(hid_t id, const std::string& what) { return {check(id, what), H5Tclose}; }
Handle plist(hid_t id, const std::string& what) { return {check(id, what), H5Pclose}; }
Handle attribute(hid_t id, const std::string& what) { return {check(id, what), H5Aclose}; }

void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

Handle vlen_string_type() {
  Handle t = type(H5Tcopy(H5T_C_S1), "string type");
  check_status(H5Tset_size(t, H5T_VARIABLE), "string type");
  check_status(H5Tset_cset(t, H5T_CSET_UTF8), "string type");
  return t;
}

namespace {

Handle create_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t space_id) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  return attribute(H5Acreate2(obj, name.c_str(), file_type, space_id, H5P_DEFAULT, H5P_DEFAULT),
                   "create attribute " + name);
}

Handle open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) throw user_error("attribute '", name, "' is missing");
  return attribute(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "open attribute " + name);
}

template <typename T>
void write_array_attr(hid_t obj, const std::string& name, hid_t mem_type, const T* data,
                      hsize_t n) {
  Handle sp = space(n == 0 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr),
                    "attribute space " + name);
  Handle a = create_attr(obj, name, mem_type, sp);
  if (n > 0) check_status(H5Awrite(a, mem_type, data), "write attribute " + name);
}

int64_t attr_elements(hid_t a) {
  Handle sp = space(H5Aget_space(a), "attribute space");
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  return n < 0 ? 0 : static_cast<int64_t>(n);
}

// A corrupt (or hostile) header may claim any size; an attribute's value is stored in the
// file, so one larger than the whole file is refused before anything is allocated for it.
void check_fits_in_file(hid_t obj, uint64_t elements, uint64_t element_bytes,
                        const std::string& name) {
  Handle f(H5Iget_file_id(obj), H5Fclose);
  hsize_t file_bytes = 0;
  if (!f.valid() || H5Fget_filesize(f, &file_bytes) < 0) return;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, element_bytes, &bytes) || bytes > file_bytes)
    throw user_error("attribute '", name, "' claims ", elements, " x ", element_bytes,
                     " bytes, more than the whole file (", file_bytes, " bytes)");
}

}  // namespace

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle t = vlen_string_type();
  Handle sp = space(H5Screate(H5S_SCALAR), "attribute space " + name);
  Handle a = create_attr(obj, name, t, sp);
  const char* p = value.c_str();
  check_status(H5Awrite(a, t, &p), "write attribute " + name);
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  Handle sp = space(H5Screate(H5S_SCALAR), "attribute space " + name);
  Handle a = create_attr(obj, name, H5T_STD_I64LE, sp);
  check_status(H5Awrite(a, H5T_NATIVE_INT64, &value), "write attribute " + name);
}

void write_attr(hid_t obj, const std::string& name, double value) {
  Handle sp = space(H5Screate(H5S_SCALAR), "attribute space " + name);
  Handle a = create_attr(obj, name, H5T_IEEE_F64LE, sp);
  check_status(H5Awrite(a, H5T_NATIVE_DOUBLE, &value), "write attribute " + name);
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  write_array_attr(obj, name, H5T_NATIVE_INT64, values.data(), values.size());
}

void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values) {
  write_array_attr(obj, name, H5T_NATIVE_DOUBLE, values.data(), values.size());
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string read_attr_string(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  Handle ftype = type(H5Aget_type(a), "attribute type " + name);
  if (H5Tget_class(ftype) != H5T_STRING) throw user_error("attribute '", name, "' is not a string");
  // H5Aread writes every element: one string, or it would write past `p` / `buf`.
  if (attr_elements(a) != 1) throw user_error("attribute '", name, "' is not a single string");
  if (H5Tis_variable_str(ftype) > 0) {
    Handle t = vlen_string_type();
    char* p = nullptr;
    check_status(H5Aread(a, t, &p), "read attribute " + name);
    std::string out = p ? p : "";
    if (p) H5free_memory(p);
    return out;
  }
  // fixed-length (e.g. written by another tool)
  const size_t n = H5Tget_size(ftype);
  check_fits_in_file(obj, 1, n, name);
  std::string buf(n, '\0');
  check_status(H5Aread(a, ftype, buf.data()), "read attribute " + name);
  buf.resize(buf.find('\0') == std::string::npos ? n : buf.find('\0'));
  return buf;
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  if (attr_elements(a) != 1) throw user_error("attribute '", name, "' is not a scalar");
  int64_t v = 0;
  check_status(H5Aread(a, H5T_NATIVE_INT64, &v), "read attribute " + name);
  return v;
}

double read_attr_double(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  if (attr_elements(a) != 1) throw user_error("attribute '", name, "' is not a scalar");
  double v = 0;
  check_status(H5Aread(a, H5T_NATIVE_DOUBLE, &v), "read attribute " + name);
  return v;
}

std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  check_fits_in_file(obj, uint64_t(attr_elements(a)), sizeof(int64_t), name);
  std::vector<int64_t> v(static_cast<size_t>(attr_elements(a)));
  if (!v.empty()) check_status(H5Aread(a, H5T_NATIVE_INT64, v.data()), "read attribute " + name);
  return v;
}

std::vector<double> read_attr_doubles(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  check_fits_in_file(obj, uint64_t(attr_elements(a)), sizeof(double), name);
  std::vector<double> v(static_cast<size_t>(attr_elements(a)));
  if (!v.empty()) check_status(H5Aread(a, H5T_NATIVE_DOUBLE, v.data()), "read attribute " + name);
  return v;
}

bool link_exists(hid_t loc, const std::string& path) {
  // H5Lexists needs every intermediate component to exist: walk them one by one.
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    const size_t next = path.find('/', pos + 1);
    prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0)
      return false;
    pos = next;
  }
  return true;
}

}  // namespace hlp::metrics::h5
