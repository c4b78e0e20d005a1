#include "metrics/trace_row.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace hlp::metrics {

namespace {
h5::Handle fixed_string(size_t bytes) {
  h5::Handle t = h5::type(H5Tcopy(H5T_C_S1), "trace string type");
  H5Tset_size(t, bytes);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  return t;
}

template <size_t N>
void copy_padded(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(N, src.size()));
}

template <size_t N>
std::string from_padded(const char (&src)[N]) {
  const void* nul = std::memchr(src, 0, N);
  return std::string(src, nul ? static_cast<const char*>(nul) - src : N);
}
}  // namespace

h5::Handle make_trace_row_type() {
  h5::Handle t = h5::type(H5Tcreate(H5T_COMPOUND, sizeof(TraceRow)), "trace row type");
  h5::Handle name_t = fixed_string(schema::kTraceNameBytes);
  h5::Handle cat_t = fixed_string(schema::kTraceCategoryBytes);
  H5Tinsert(t, schema::kEvName, offsetof(TraceRow, name), name_t);
  H5Tinsert(t, schema::kEvCategory, offsetof(TraceRow, category), cat_t);
  H5Tinsert(t, schema::kEvLane, offsetof(TraceRow, lane), H5T_NATIVE_INT32);
  H5Tinsert(t, schema::kEvMicroBatch, offsetof(TraceRow, micro_batch), H5T_NATIVE_INT32);
  H5Tinsert(t, schema::kEvStart, offsetof(TraceRow, start_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, schema::kEvEnd, offsetof(TraceRow, end_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, schema::kEvStep, offsetof(TraceRow, step), H5T_NATIVE_INT64);
  H5Tinsert(t, schema::kEvBytes, offsetof(TraceRow, bytes), H5T_NATIVE_INT64);
  return t;
}

bool is_trace_row_type(hid_t stored) {
  if (H5Tget_class(stored) != H5T_COMPOUND) return false;
  const h5::Handle expected = make_trace_row_type();
  const int members = H5Tget_nmembers(expected);
  const size_t row_bytes = H5Tget_size(stored);
  if (H5Tget_nmembers(stored) != members) return false;
  for (int i = 0; i < members; ++i) {
    char* name = H5Tget_member_name(expected, unsigned(i));
    const int index = H5Tget_member_index(stored, name);
    H5free_memory(name);
    if (index < 0) return false;
    const h5::Handle want(H5Tget_member_type(expected, unsigned(i)), H5Tclose);
    const h5::Handle have(H5Tget_member_type(stored, unsigned(index)), H5Tclose);
    if (!have.valid() || H5Tget_class(have) != H5Tget_class(want) ||
        H5Tget_size(have) != H5Tget_size(want))
      return false;
    const size_t offset = H5Tget_member_offset(stored, unsigned(index));
    if (offset > row_bytes || H5Tget_size(have) > row_bytes - offset) return false;
  }
  return true;
}

std::vector<TraceRow> to_trace_rows(const std::vector<TraceEvent>& events) {
  std::vector<TraceRow> rows(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    TraceRow& r = rows[i];
    copy_padded(r.name, e.name);
    copy_padded(r.category, e.category);
    r.lane = static_cast<int32_t>(e.lane);
    r.micro_batch = e.micro_batch;
    r.start_s = e.start_s;
    r.end_s = e.end_s;
    r.step = e.step;
    r.bytes = e.bytes;
  }
  return rows;
}

std::vector<TraceEvent> from_trace_rows(const std::vector<TraceRow>& rows) {
  std::vector<TraceEvent> events(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const TraceRow& r = rows[i];
    TraceEvent& e = events[i];
    e.name = from_padded(r.name);
    e.category = from_padded(r.category);
    e.lane = static_cast<Lane>(r.lane);
    e.micro_batch = r.micro_batch;
    e.start_s = r.start_s;
    e.end_s = r.end_s;
    e.step = r.step;
    e.bytes = r.bytes;
  }
  return events;
}

}  // namespace hlp::metrics
