#include "comm/staging.h"

#include <ATen/ATen.h>

#include "comm/dtype.h"
#include "comm/shard.h"

namespace hlp::comm {

at::TensorOptions host_options(const at::TensorOptions& like) {
  const bool on_gpu = like.device().is_cuda();
  return like.device(at::kCPU).pinned_memory(on_gpu);
}

at::Tensor contiguous_buffer(const at::Tensor& t) {
  if (t.device().is_cpu()) return t.is_contiguous() ? t : t.contiguous();
  at::Tensor buffer = at::empty(t.sizes(), host_options(t.options()));
  buffer.copy_(t);  // device -> pinned host, synchronous
  return buffer;
}

at::Tensor host_output_buffer(const at::Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  return at::empty(t.sizes(), host_options(t.options()));
}

at::Tensor to_reduce_buffer(const at::Tensor& t) {
  const c10::ScalarType reduce_type = dtype_info(t.scalar_type()).reduce_type;
  if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == reduce_type) return t;
  at::Tensor buffer = at::empty(t.sizes(), host_options(t.options()).dtype(reduce_type));
  buffer.copy_(t);
  return buffer;
}

void copy_back(const at::Tensor& t, const at::Tensor& buffer) {
  if (buffer.is_same(t)) return;
  t.copy_(buffer.view(t.sizes()));
}

at::Tensor padded_reduce_input(const at::Tensor& input, int world_size) {
  const c10::ScalarType reduce_type = dtype_info(input.scalar_type()).reduce_type;
  const int64_t numel = input.numel();
  const int64_t padded = padded_numel(numel, world_size);
  if (input.device().is_cpu() && padded == numel && input.is_contiguous() &&
      input.scalar_type() == reduce_type)
    return input.view({numel});
  at::Tensor buffer = at::empty({padded}, host_options(input.options()).dtype(reduce_type));
  buffer.narrow(0, 0, numel).view(input.sizes()).copy_(input);
  buffer.narrow(0, numel, padded - numel).zero_();
  return buffer;
}

void divide_for_avg(const at::Tensor& reduced, int n) {
  if (at::isIntegralType(reduced.scalar_type(), /*includeBool=*/false))
    reduced.div_(n, "trunc");
  else
    reduced.div_(n);
}

}  // namespace hlp::comm
