#pragma once
// Staging buffers between caller tensors (any strides, any supported dtype, CPU or CUDA) and
// the flat, contiguous host buffers a backend hands to MPI. No copy when the caller's tensor
// already is one (a contiguous CPU tensor).
//
// CUDA tensors (the MPI backend with --device cuda, e.g. several ranks sharing one GPU): every
// buffer below is then a pinned host tensor. The copy in is a synchronous device-to-host copy
// made on the communication thread (on the device's default stream, so it follows the compute
// already queued there); copy_back() is a synchronous host-to-device copy before the op's Work
// completes, so compute issued after wait() sees the result. Compiles against a CPU-only
// LibTorch; runs only with a CUDA one (there is no CUDA tensor otherwise).
#include <ATen/core/Tensor.h>

namespace hlp::comm {

// Contiguous host tensor with t's values (t itself when already a contiguous CPU tensor).
at::Tensor contiguous_buffer(const at::Tensor& t);

// Uninitialised host tensor for t's values: t itself when t is a contiguous CPU tensor (the op
// may write straight into it), else a contiguous host tensor (pinned when t is on a GPU).
at::Tensor host_output_buffer(const at::Tensor& t);

// Options for a host buffer that stands in for a tensor with options `like`: CPU, pinned when
// `like` is on a GPU.
at::TensorOptions host_options(const at::TensorOptions& like);

// Contiguous tensor in the reduce dtype of t's dtype (dtype.h) holding t's values;
// t itself when it already is contiguous and in the reduce dtype.
at::Tensor to_reduce_buffer(const at::Tensor& t);

// Copies buffer back into t (dtype conversion + strides + host-to-device) unless buffer is t.
void copy_back(const at::Tensor& t, const at::Tensor& buffer);

// input (N elements) -> 1-D [world_size * ceil(N/world_size)] in the reduce dtype, zero padded;
// a flat view of input itself when nothing needs to change.
at::Tensor padded_reduce_input(const at::Tensor& input, int world_size);

// In-place Avg finish after a Sum: divide by n (truncating toward zero for integers).
void divide_for_avg(const at::Tensor& reduced, int n);

}  // namespace hlp::comm
