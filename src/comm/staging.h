#pragma once
// Staging buffers between caller tensors (any strides, any supported dtype) and the flat,
// contiguous buffers a backend hands to MPI. No copy when the caller's tensor already is one.
#include <ATen/core/Tensor.h>

namespace hlp::comm {

// Contiguous tensor with t's values (t itself when already contiguous).
at::Tensor contiguous_buffer(const at::Tensor& t);

// Contiguous tensor in the reduce dtype of t's dtype (dtype.h) holding t's values;
// t itself when it already is contiguous and in the reduce dtype.
at::Tensor to_reduce_buffer(const at::Tensor& t);

// Copies buffer back into t (dtype conversion + strides) unless buffer is t.
void copy_back(const at::Tensor& t, const at::Tensor& buffer);

// input (N elements) -> 1-D [world_size * ceil(N/world_size)] in the reduce dtype, zero padded;
// a flat view of input itself when nothing needs to change.
at::Tensor padded_reduce_input(const at::Tensor& input, int world_size);

// In-place Avg finish after a Sum: divide by n (truncating toward zero for integers).
void divide_for_avg(const at::Tensor& reduced, int n);

}  // namespace hlp::comm
