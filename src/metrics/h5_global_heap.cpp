#include "metrics/h5_global_heap.h"

#include <fcntl.h>
#include <string.h>  // memmem
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>

#include "common/error.h"

namespace hlp::metrics::h5 {
namespace {

constexpr uint64_t kMinCollectionBytes = 4096;  // H5HG_MINSIZE
constexpr uint64_t kHeaderBytes = 16;           // "GCOL", version 1, 3 reserved, u64 size
constexpr uint64_t kObjectHeaderBytes = 16;     // u16 index, u16 refcount, 4 reserved, u64 size

uint64_t little_endian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The objects of the collection `c` of `bytes` at file offset `offset`: each must end inside it.
void check_collection(const unsigned char* c, uint64_t bytes, uint64_t offset,
                      const std::string& path) {
  for (uint64_t pos = kHeaderBytes; bytes - pos >= kObjectHeaderBytes;) {
    const uint64_t size = little_endian(c + pos + 8, 8);
    if (little_endian(c + pos, 2) == 0) {
      // Object 0 is the free space, which libhdf5 keeps at the end: its size (header included)
      // is the rest. A size of 0 makes libhdf5 1.10.8's loader loop forever on the same bytes.
      if (size != bytes - pos)
        throw user_error("'", path, "' is corrupt: the HDF5 global heap at byte ", offset,
                         " has free space of ", size, " bytes where ", bytes - pos, " are left");
      return;
    }
    const uint64_t room = bytes - pos - kObjectHeaderBytes;
    if (size > room)
      throw user_error("'", path, "' is corrupt: the HDF5 global heap at byte ", offset,
                       " holds an object of ", size, " bytes with ", room, " bytes left in it");
    pos += kObjectHeaderBytes + ((size + 7) & ~uint64_t(7));  // objects are 8-byte aligned
    if (pos >= bytes) return;
  }
}

}  // namespace

void check_global_heaps(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;  // the caller reports an unreadable file
  struct stat st {};
  const uint64_t file_bytes = ::fstat(fd, &st) == 0 ? uint64_t(st.st_size) : 0;
  void* map = file_bytes > 0 ? ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) return;
  struct Unmap {
    void* map;
    uint64_t bytes;
    ~Unmap() { ::munmap(map, bytes); }
  } unmap{map, file_bytes};
  const auto* file = static_cast<const unsigned char*>(map);
  for (uint64_t offset = 0; offset < file_bytes;) {
    const void* found = ::memmem(file + offset, file_bytes - offset, "GCOL", 4);
    if (!found) return;
    offset = uint64_t(static_cast<const unsigned char*>(found) - file);
    const unsigned char* h = file + offset;
    const uint64_t left = file_bytes - offset;
    const uint64_t bytes = left >= kHeaderBytes ? little_endian(h + 8, 8) : 0;
    // Else the letters GCOL inside some data, or a collection cut short (libhdf5 reads
    // nothing past the file's end).
    if (left >= kHeaderBytes && h[4] == 1 && h[5] == 0 && h[6] == 0 && h[7] == 0 &&
        bytes >= kMinCollectionBytes && bytes <= left)
      check_collection(h, bytes, offset, path);
    offset += 4;
  }
}

}  // namespace hlp::metrics::h5
