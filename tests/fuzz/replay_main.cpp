// Replays fuzz inputs without libFuzzer, in the normal test suite: calls the target's
// LLVMFuzzerTestOneInput on every file of the directories given (README files skipped), so
// that the seed corpus and every input that once crashed or hung a fuzzer run again on each
// `make test`. An exception escaping the target fails the replay with the file's name.
//   fuzz_replay_<target> DIR...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::is_directory(argv[i])) {
      std::fprintf(stderr, "replay: '%s' is not a directory\n", argv[i]);
      return 2;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(argv[i]))
      if (e.is_regular_file() && e.path().filename().string().rfind("README", 0) != 0)
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::ifstream in(file, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      std::printf("replay %s (%zu bytes)\n", file.c_str(), bytes.size());
      std::fflush(stdout);
      try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "replay: %s: uncaught exception: %s\n", file.c_str(), e.what());
        return 1;
      }
      ++replayed;
    }
  }
  std::printf("replayed %zu inputs\n", replayed);
  return 0;
}
