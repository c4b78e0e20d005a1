#pragma once
// The on-disk row of /trace/rank<N> (an HDF5 compound) and its conversion to/from TraceEvent.
// Fixed-length strings (parallel HDF5 cannot write variable-length data collectively).
#include <vector>

#include "metrics/h5_util.h"
#include "metrics/schema.h"
#include "metrics/trace_event.h"

namespace hlp::metrics {

struct TraceRow {
  char name[schema::kTraceNameBytes];          // NUL-padded
  char category[schema::kTraceCategoryBytes];  // NUL-padded
  int32_t lane;
  int32_t micro_batch;
  double start_s;
  double end_s;
  int64_t step;
  int64_t bytes;
};

h5::Handle make_trace_row_type();
// True when `stored` (a /trace dataset's type) is the compound the writer makes: the same
// members, each of the same class and size, inside the row. Checked before H5Dread converts
// it: libhdf5 1.10.8's compound conversion reads and writes out of bounds on a corrupt member
// layout (tests/fuzz/third_party/result_file/).
bool is_trace_row_type(hid_t stored);
std::vector<TraceRow> to_trace_rows(const std::vector<TraceEvent>& events);
std::vector<TraceEvent> from_trace_rows(const std::vector<TraceRow>& rows);

}  // namespace hlp::metrics
