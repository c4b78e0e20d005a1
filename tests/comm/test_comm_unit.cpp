// Single-process rules of the communicator: the sharding/padding rule, the dtype table, the
// bf16 staging through float32, and the Avg rounding rule.
#include "catch_aten.h"

#include "comm/communicator.h"
#include "comm/dtype.h"
#include "comm/shard.h"
#include "comm/staging.h"

using namespace hlp::comm;

TEST_CASE("shard_range splits N elements into ceil(N/n) slots, the tail clamped to N", "[comm][shard]") {
  CHECK(shard_numel(10, 4) == 3);
  CHECK(padded_numel(10, 4) == 12);
  CHECK(shard_range(10, 4, 0).begin == 0);
  CHECK(shard_range(10, 4, 0).end == 3);
  CHECK(shard_range(10, 4, 3).begin == 9);
  CHECK(shard_range(10, 4, 3).end == 10);
  CHECK(shard_range(10, 4, 3).size() == 1);
  // fewer elements than ranks: trailing ranks own nothing
  CHECK(shard_numel(2, 4) == 1);
  CHECK(shard_range(2, 4, 1).size() == 1);
  CHECK(shard_range(2, 4, 2).size() == 0);
  CHECK(shard_range(2, 4, 3).begin == 2);
  CHECK(shard_range(0, 3, 0).size() == 0);
  CHECK(shard_numel(0, 3) == 0);
  CHECK(shard_numel(12, 4) == 3);
  CHECK(padded_numel(12, 4) == 12);
}

TEST_CASE("shard ranges tile 0..N exactly, in rank order", "[comm][shard]") {
  for (int n = 1; n <= 9; ++n)
    for (int64_t numel = 0; numel <= 50; ++numel) {
      int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        ShardRange range = shard_range(numel, n, r);
        CHECK(range.begin == next);
        CHECK(range.size() <= shard_numel(numel, n));
        CHECK(range.size() >= 0);
        next = range.end;
      }
      CHECK(next == numel);
    }
}

TEST_CASE("shard helpers reject impossible arguments", "[comm][shard]") {
  CHECK_THROWS_AS(shard_numel(5, 0), std::invalid_argument);
  CHECK_THROWS_AS(shard_numel(-1, 2), std::invalid_argument);
  CHECK_THROWS_WITH(shard_range(5, 2, 2), Catch::Contains("rank 2 outside [0, 2)"));
}

TEST_CASE("dtype table: supported types, sizes, reduce types", "[comm][dtype]") {
  CHECK(dtype_info(at::kFloat).element_bytes == 4);
  CHECK(dtype_info(at::kDouble).element_bytes == 8);
  CHECK(dtype_info(at::kLong).element_bytes == 8);
  CHECK(dtype_info(at::kBFloat16).element_bytes == 2);
  CHECK(dtype_info(at::kBFloat16).reduce_type == at::kFloat);
  CHECK(dtype_info(at::kLong).reduce_type == at::kLong);
  CHECK(std::string(dtype_info(at::kBFloat16).name) == "bfloat16");
  CHECK(dtype_info(at::kHalf).element_bytes == 2);  // fp16 frozen weights (--base-dtype)
  CHECK(dtype_info(at::kHalf).reduce_type == at::kFloat);
  CHECK(is_supported_dtype(at::kFloat));
  CHECK(is_supported_dtype(at::kHalf));
  CHECK_FALSE(is_supported_dtype(at::kInt));
  CHECK_THROWS_WITH(dtype_info(at::kInt), Catch::Contains("supported: float32, bfloat16, float16"));
  CHECK(tensor_bytes(at::zeros({3, 5}, at::kBFloat16)) == 30);
}

TEST_CASE("bf16 reduces through float32 and rounds once", "[comm][dtype][bf16]") {
  // 256 + 1 + 1: in bf16 (8 significant bits) 256 + 1 rounds back to 256 at every step, so a
  // bf16 accumulation gives 256; one rounding of the float32 sum 258 gives 258.
  at::Tensor a = at::full({4}, 256.0, at::kBFloat16);
  at::Tensor buffer = to_reduce_buffer(a);
  CHECK(buffer.scalar_type() == at::kFloat);
  CHECK_FALSE(buffer.is_same(a));
  buffer += 1.0;
  buffer += 1.0;
  copy_back(a, buffer);
  CHECK(a.scalar_type() == at::kBFloat16);
  CHECK(at::equal(a.to(at::kFloat), at::full({4}, 258.0, at::kFloat)));
  // bf16-only accumulation for contrast
  at::Tensor naive = at::full({4}, 256.0, at::kBFloat16);
  naive += 1.0;
  naive += 1.0;
  CHECK(at::equal(naive.to(at::kFloat), at::full({4}, 256.0, at::kFloat)));
}

TEST_CASE("staging buffers alias contiguous tensors and copy strided ones", "[comm][staging]") {
  at::Tensor x = at::arange(6, at::kFloat);
  CHECK(to_reduce_buffer(x).is_same(x));
  CHECK(contiguous_buffer(x).is_same(x));
  at::Tensor strided = at::arange(12, at::kFloat).view({6, 2}).select(1, 0);
  at::Tensor buffer = to_reduce_buffer(strided);
  CHECK(buffer.is_contiguous());
  CHECK(at::equal(buffer, strided));
  buffer.mul_(10);
  copy_back(strided, buffer);
  CHECK(at::equal(strided, at::arange(0, 120, 20, at::kFloat)));
}

TEST_CASE("staging: CPU tensors stay on plain host memory, only GPU tensors get pinned buffers",
          "[comm][staging]") {
  // The CUDA half (pinned buffers, device<->host copies) needs a CUDA LibTorch and a GPU; here
  // the CPU half: no pinning, no copy for a contiguous CPU tensor, a fresh host tensor otherwise.
  at::Tensor x = at::arange(6, at::kFloat);
  CHECK(host_output_buffer(x).is_same(x));
  at::Tensor strided = at::arange(12, at::kFloat).view({6, 2}).select(1, 0);
  at::Tensor out = host_output_buffer(strided);
  CHECK_FALSE(out.is_same(strided));
  CHECK(out.is_contiguous());
  CHECK(out.device().is_cpu());
  CHECK(out.sizes() == strided.sizes());
  const at::TensorOptions host = host_options(x.options());
  CHECK(host.device().is_cpu());
  CHECK_FALSE(host.pinned_memory());
  const at::TensorOptions from_gpu = host_options(x.options().device(at::kCUDA, 0));
  CHECK(from_gpu.device().is_cpu());
  CHECK(from_gpu.pinned_memory());
}

TEST_CASE("padded_reduce_input pads with zeros to n * ceil(N/n)", "[comm][staging]") {
  at::Tensor x = at::arange(1, 11, at::kLong);  // 10 elements
  at::Tensor padded = padded_reduce_input(x, 4);
  REQUIRE(padded.numel() == 12);
  CHECK(at::equal(padded.narrow(0, 0, 10), x));
  CHECK(at::equal(padded.narrow(0, 10, 2), at::zeros({2}, at::kLong)));
  // divisible, contiguous, reduce dtype: no copy
  at::Tensor y = at::arange(8, at::kFloat);
  CHECK(padded_reduce_input(y, 4).data_ptr() == y.data_ptr());
  // bf16 comes out as float32
  CHECK(padded_reduce_input(y.to(at::kBFloat16), 4).scalar_type() == at::kFloat);
}

TEST_CASE("avg divides floats exactly and truncates integers toward zero", "[comm][avg]") {
  at::Tensor f = at::tensor({3.0, -3.0}, at::kDouble);
  divide_for_avg(f, 2);
  CHECK(at::equal(f, at::tensor({1.5, -1.5}, at::kDouble)));
  at::Tensor i = at::tensor({int64_t(7), int64_t(-7)}, at::kLong);
  divide_for_avg(i, 2);
  CHECK(at::equal(i, at::tensor({int64_t(3), int64_t(-3)}, at::kLong)));
}

TEST_CASE("names of op kinds and reduce ops", "[comm]") {
  CHECK(std::string(op_kind_name(OpKind::AllReduce)) == "all_reduce");
  CHECK(std::string(op_kind_name(OpKind::Barrier)) == "barrier");
  CHECK(std::string(op_kind_name(OpKind::AllToAll)) == "all_to_all");
  CHECK(std::string(reduce_op_name(ReduceOp::Avg)) == "avg");
}
