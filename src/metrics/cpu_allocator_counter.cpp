// The counting CPU allocator. Every allocation gets a 64-byte header in front of the data
// (keeps the 64-byte alignment of c10's default allocator) holding the requested size and the
// wrapped allocator's context and deleter; the DataPtr we hand out has data == context, so
// LibTorch's raw_allocate/raw_deallocate path keeps working through raw_deleter().
#include "metrics/cpu_allocator_counter.h"

#include <torch/version.h>

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

namespace hlp::metrics {

namespace {

constexpr size_t kHeaderBytes = 64;
constexpr uint64_t kMagic = 0x484c50616c6c6f63ull;  // "HLPalloc"
// SetCPUAllocator only replaces an allocator of lower or equal priority; c10 registers its
// default at 0. Install and uninstall both use this one so each can undo the other.
constexpr uint8_t kPriority = 200;

struct Header {
  uint64_t magic;
  size_t bytes;
  void* base_context;
  c10::DeleterFnPtr base_deleter;
};
static_assert(sizeof(Header) <= kHeaderBytes, "header must fit in front of the data");

std::atomic<int64_t> g_current_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_allocations{0};

void raise_peak(int64_t candidate) {
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (candidate > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, candidate, std::memory_order_relaxed)) {
  }
}

void counted_delete(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  g_current_bytes.fetch_sub(static_cast<int64_t>(header->bytes), std::memory_order_relaxed);
  header->magic = 0;
  c10::DeleterFnPtr base_deleter = header->base_deleter;
  void* base_context = header->base_context;
  if (base_deleter) base_deleter(base_context);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::Allocator* base = nullptr;

  // LibTorch 2.3 made allocate() non-const and added the pure virtual copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    if (n == 0) return base->allocate(0);  // empty tensors: nothing to count, keep c10's nullptr
    c10::DataPtr inner = base->allocate(n + kHeaderBytes);
    c10::DeleterFnPtr base_deleter = inner.get_deleter();
    const c10::Device device = inner.device();
    char* raw = static_cast<char*>(inner.get());
    void* base_context = inner.release_context();  // we own it now; freed in counted_delete
    auto* header = reinterpret_cast<Header*>(raw);
    header->magic = kMagic;
    header->bytes = n;
    header->base_context = base_context;
    header->base_deleter = base_deleter;
    const int64_t now = g_current_bytes.fetch_add(static_cast<int64_t>(n),
                                                  std::memory_order_relaxed) +
                        static_cast<int64_t>(n);
    raise_peak(now);
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    void* data = raw + kHeaderBytes;
    return {data, data, &counted_delete, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }
};

CountingCpuAllocator g_counting;  // static lifetime, as c10::SetAllocator requires
std::mutex g_install_mutex;
bool g_installed = false;

}  // namespace

void CpuAllocatorCounter::install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current != &g_counting) g_counting.base = current;
  c10::SetCPUAllocator(&g_counting, kPriority);
  g_installed = c10::GetCPUAllocator() == &g_counting;
}

void CpuAllocatorCounter::uninstall() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (!g_installed) return;
  c10::SetCPUAllocator(g_counting.base, kPriority);
  g_installed = false;
}

bool CpuAllocatorCounter::installed() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  return g_installed;
}

int64_t CpuAllocatorCounter::current_bytes() {
  return g_current_bytes.load(std::memory_order_relaxed);
}

int64_t CpuAllocatorCounter::peak_bytes() { return g_peak_bytes.load(std::memory_order_relaxed); }

void CpuAllocatorCounter::reset_peak() {
  g_peak_bytes.store(g_current_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryStats CpuAllocatorCounter::stats() {
  MemoryStats s;
  s.current_bytes = current_bytes();
  s.peak_bytes = peak_bytes();
  s.allocations = g_allocations.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hlp::metrics
