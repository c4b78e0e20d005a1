#pragma once
// Which tensor dtypes the communicators accept, and how each is moved and reduced.
//
// | dtype    | bytes | moved as          | reduced in |
// |----------|-------|-------------------|------------|
// | float32  | 4     | MPI_FLOAT         | float32    |
// | float64  | 8     | MPI_DOUBLE        | float64    |
// | int64    | 8     | MPI_INT64_T       | int64      |
// | bfloat16 | 2     | MPI_UINT16_T bits | float32    |
// | float16  | 2     | MPI_UINT16_T bits | float32    |
//
// MPI has no bfloat16 or float16 (frozen weights stored in 16 bits, --base-dtype): all_gather / broadcast / send / recv move the raw 16-bit patterns, and
// all_reduce / reduce_scatter convert to float32, reduce in float32 and round the result once
// back to the 16-bit type (round-to-nearest-even, ATen's conversion). So a bf16 sum over n ranks is
// the correctly rounded float32 sum, not n-1 successive bf16 roundings (NCCL rounds per step).
// Avg = Sum then divide by n in the reduce dtype; for int64 the division truncates toward zero.
#include <c10/core/ScalarType.h>

namespace hlp::comm {

struct DtypeInfo {
  c10::ScalarType type;
  const char* name;           // "float32", "bfloat16", ...
  int element_bytes;
  c10::ScalarType reduce_type;  // dtype the reduction arithmetic runs in
};

bool is_supported_dtype(c10::ScalarType type);

// Throws std::invalid_argument naming the dtype and the supported ones.
const DtypeInfo& dtype_info(c10::ScalarType type);

}  // namespace hlp::comm
