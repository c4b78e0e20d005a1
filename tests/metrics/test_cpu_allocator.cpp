// CpuAllocatorCounter: measured bytes of known-size LibTorch allocations, peaks, reset.
#include "catch_compat.h"

#include <torch/torch.h>
#include <c10/core/CPUAllocator.h>

#include <thread>
#include <vector>

#include "metrics/cpu_allocator_counter.h"

using hlp::metrics::CpuAllocatorCounter;

namespace {
constexpr int64_t kMiB = 1 << 20;
}

TEST_CASE("metrics allocator: tensors allocated before install are freed through their own deleter", "[allocator]") {
  // Allocated by c10's default allocator; freed after install without touching the counters.
  auto before = std::make_unique<at::Tensor>(at::empty({kMiB / 4}, at::kFloat));
  CpuAllocatorCounter::install();
  REQUIRE(CpuAllocatorCounter::installed());
  const int64_t base = CpuAllocatorCounter::current_bytes();
  before.reset();
  CHECK(CpuAllocatorCounter::current_bytes() == base);
}

TEST_CASE("metrics allocator: allocating and freeing known sizes moves current and peak by exactly those bytes",
          "[allocator]") {
  CpuAllocatorCounter::install();
  const int64_t base = CpuAllocatorCounter::current_bytes();
  CpuAllocatorCounter::reset_peak();
  CHECK(CpuAllocatorCounter::peak_bytes() == base);
  {
    at::Tensor a = at::empty({kMiB / 4}, at::kFloat);  // 1 MiB
    CHECK(CpuAllocatorCounter::current_bytes() - base == kMiB);
    at::Tensor b = at::empty({3 * kMiB}, at::kByte);  // 3 MiB
    CHECK(CpuAllocatorCounter::current_bytes() - base == 4 * kMiB);
    CHECK(CpuAllocatorCounter::peak_bytes() - base == 4 * kMiB);
    b = at::Tensor();  // free 3 MiB
    CHECK(CpuAllocatorCounter::current_bytes() - base == kMiB);
    CHECK(CpuAllocatorCounter::peak_bytes() - base == 4 * kMiB);  // peak remembers
    at::Tensor c = at::empty({kMiB / 8}, at::kDouble);  // 1 MiB: below the old peak
    CHECK(CpuAllocatorCounter::current_bytes() - base == 2 * kMiB);
    CHECK(CpuAllocatorCounter::peak_bytes() - base == 4 * kMiB);
    CpuAllocatorCounter::reset_peak();  // a new step starts
    CHECK(CpuAllocatorCounter::peak_bytes() - base == 2 * kMiB);
  }
  CHECK(CpuAllocatorCounter::current_bytes() == base);
  auto s = CpuAllocatorCounter::stats();
  CHECK(s.current_bytes == base);
  CHECK(s.peak_bytes - base == 2 * kMiB);
  CHECK(s.allocations >= 3);
}

TEST_CASE("metrics allocator: the data pointer stays usable and 64-byte aligned and ops allocate through the counter",
          "[allocator]") {
  CpuAllocatorCounter::install();
  const int64_t base = CpuAllocatorCounter::current_bytes();
  at::Tensor a = at::ones({256, 256}, at::kFloat);
  CHECK(reinterpret_cast<uintptr_t>(a.data_ptr()) % 64 == 0);
  at::Tensor b = at::mm(a, a);  // result: 256 KiB more (plus any workspace, freed again)
  CHECK(b[3][5].item<float>() == 256.0f);
  CHECK(CpuAllocatorCounter::current_bytes() - base == 2 * 256 * 256 * 4);
  // raw_allocate / raw_deallocate (used by some LibTorch internals) work through raw_deleter.
  c10::Allocator* alloc = c10::GetCPUAllocator();
  void* p = alloc->raw_allocate(1000);
  CHECK(CpuAllocatorCounter::current_bytes() - base == 2 * 256 * 256 * 4 + 1000);
  alloc->raw_deallocate(p);
  CHECK(CpuAllocatorCounter::current_bytes() - base == 2 * 256 * 256 * 4);
}

TEST_CASE("metrics allocator: counting is exact under concurrent allocation from several threads", "[allocator]") {
  CpuAllocatorCounter::install();
  const int64_t base = CpuAllocatorCounter::current_bytes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i) {
        at::Tensor x = at::empty({1000 + i}, at::kByte);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(CpuAllocatorCounter::current_bytes() == base);
  CHECK(CpuAllocatorCounter::peak_bytes() - base >= 1000);
}

TEST_CASE("metrics allocator: uninstall restores the previous allocator and counted tensors are still uncounted on free",
          "[allocator]") {
  CpuAllocatorCounter::install();
  const int64_t base = CpuAllocatorCounter::current_bytes();
  auto counted = std::make_unique<at::Tensor>(at::empty({kMiB}, at::kByte));
  CHECK(CpuAllocatorCounter::current_bytes() - base == kMiB);
  CpuAllocatorCounter::uninstall();
  CHECK_FALSE(CpuAllocatorCounter::installed());
  at::Tensor uncounted = at::empty({kMiB}, at::kByte);
  CHECK(CpuAllocatorCounter::current_bytes() - base == kMiB);
  counted.reset();
  CHECK(CpuAllocatorCounter::current_bytes() == base);
  CpuAllocatorCounter::install();  // back for the other cases
  CHECK(CpuAllocatorCounter::installed());
}

TEST_CASE("metrics allocator: an autograd training step runs under the counter, peaks above its "
          "live bytes, and frees back to the baseline",
          "[allocator]") {
  CpuAllocatorCounter::install();
  const int64_t base = CpuAllocatorCounter::current_bytes();
  {
    torch::nn::Linear layer(256, 512);
    torch::optim::SGD opt(layer->parameters(), torch::optim::SGDOptions(0.1));
    const int64_t params = CpuAllocatorCounter::current_bytes() - base;
    CHECK(params >= (256 * 512 + 512) * 4);  // weight + bias, counted
    CpuAllocatorCounter::reset_peak();
    for (int step = 0; step < 3; ++step) {
      torch::Tensor x = torch::randn({64, 256});
      torch::Tensor loss = layer->forward(x).relu().pow(2).mean();
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    // activations + gradients existed during the step: the peak is above what is live now
    CHECK(CpuAllocatorCounter::peak_bytes() > CpuAllocatorCounter::current_bytes());
    CHECK(CpuAllocatorCounter::peak_bytes() - base >= params + 64 * 512 * 4);
  }
  CHECK(CpuAllocatorCounter::current_bytes() == base);
}
