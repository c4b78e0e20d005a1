#pragma once
// What the fuzz targets share: the input as a file (for parsers whose API takes a path), at a
// fixed path per process and name under /dev/shm (or the temp directory), so that neither
// libFuzzer nor the replay leaves files behind (the directory goes at exit).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace hlp::fuzz {

// /dev/shm/hlp-fuzz-<pid>/<name> holding the `size` bytes at `data`.
inline std::string input_file(const std::string& name, const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    // tmpfs when there is one: rewriting a file on a disk mounted with `discard` costs ms.
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    const std::string d = (base / ("hlp-fuzz-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(d);
    static const std::string removed_at_exit = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return d;
  }();
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool written = f && (size == 0 || std::fwrite(data, 1, size, f) == size);
  if (!f || std::fclose(f) != 0 || !written) {
    std::perror(path.c_str());
    std::abort();  // the machine, not the input: stop the fuzzer
  }
  return path;
}

}  // namespace hlp::fuzz
