// hlp-bench-data: throughput of the data path and its memory bound.
//
//   1. tokens/s of the Loader (read + tokenize + pack) for the byte-level, SentencePiece and
//      Hugging Face byte-level BPE (Qwen3's tokenizer.json) tokenizers at 1 and 2 loader
//      threads, streaming datasets/sample/corpus.txt; and tokenizer.json's encode() alone on one
//      thread, first pass (empty word cache) and second pass (warm cache);
//   2. peak RSS while streaming one full epoch of generated corpora of two sizes (default 1 and
//      2 GiB, written to /tmp, never to the repo): each size runs in a fresh child process
//      (this binary with --stream-only) so that VmHWM is that run's own peak.
//
// On a machine shared with other work, tokens_per_s only scales with threads if the cores are
// free: cpu_s_per_s (process CPU seconds per wall second) shows how many cores the run got.
//
// Usage: hlp-bench-data [--sample FILE] [--spm FILE] [--hf-json FILE] [--gen-dir DIR]
//                       [--sizes-mib 1024,2048 | --sizes-mib ''] [--seconds S] [--keep]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "data/loader.h"

extern char** environ;

namespace {

using hlp::data::DataOptions;
using hlp::data::Loader;

// "VmHWM" / "VmRSS" of /proc/self/status, in bytes.
int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0 && line[n] == ':') return std::atoll(line.c_str() + n + 1) * 1024;
  return -1;
}

struct Rate {
  double tokens_per_s = 0, cpu_per_wall = 0, wait_s = 0;
};

// CPU seconds of the whole process (all threads): on a shared machine, cpu/wall shows how many
// cores the loader really got.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Rate measure_loader(const DataOptions& o, double seconds) {
  Loader loader(o, 0, 1);
  loader.next();  // warm-up: threads started, first chunks tokenized
  const double t0 = hlp::now_s(), cpu0 = process_cpu_s();
  int64_t tokens = 0;
  const double wait0 = loader.total_wait_s();
  while (hlp::now_s() - t0 < seconds) {
    const auto b = loader.next();
    tokens += static_cast<int64_t>(b.tokens.size());
  }
  const double dt = hlp::now_s() - t0;
  return Rate{tokens / dt, (process_cpu_s() - cpu0) / dt, loader.total_wait_s() - wait0};
}

// The blank-line separated documents of a .txt file.
std::vector<std::string> read_documents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) docs.push_back(text.substr(pos, end - pos));
    pos = end + 2;
  }
  return docs;
}

// encode() of every document of `sample` on this thread, twice: the first pass starts with an
// empty per-thread word cache. Returns tokens/s of each pass.
std::pair<double, double> measure_encode(const std::string& tokenizer, const std::string& sample) {
  const auto tok = hlp::data::make_tokenizer(tokenizer);  // a new tokenizer: a new, empty cache
  const std::vector<std::string> docs = read_documents(sample);
  double rate[2];
  std::vector<int32_t> ids;
  for (double& r : rate) {
    ids.clear();
    const double t0 = hlp::now_s();
    for (const auto& d : docs) tok->encode(d, ids);
    r = ids.size() / (hlp::now_s() - t0);
  }
  return {rate[0], rate[1]};
}

// Writes `mib` MiB of text documents (the sample's documents, numbered) as 64 MiB shards.
void generate_corpus(const std::string& sample, const std::string& dir, int64_t mib) {
  const std::vector<std::string> docs = read_documents(sample);
  std::filesystem::create_directories(dir);
  const int64_t shard_bytes = 64ll << 20, total = mib << 20;
  int64_t written = 0, doc = 0;
  for (int shard = 0; written < total; ++shard) {
    char name[64];
    std::snprintf(name, sizeof(name), "/part-%04d.txt", shard);
    std::ofstream out(dir + name, std::ios::binary);
    int64_t in_shard = 0;
    while (in_shard < shard_bytes && written < total) {
      const std::string d = "Document " + std::to_string(doc) + ".\n" + docs[doc % docs.size()] + "\n\n";
      ++doc;
      out << d;
      in_shard += static_cast<int64_t>(d.size());
      written += static_cast<int64_t>(d.size());
    }
  }
}

// Child mode: stream one epoch of `path`, print "rss_before rss_peak tokens seconds wait".
int stream_only(const std::string& path, int threads) {
  const int64_t rss_before = proc_status_bytes("VmRSS");  // before the loader exists
  DataOptions o;
  o.path = path;
  o.tokenizer = "byte";
  o.seq_len = 1024;
  o.global_batch = 8;
  o.loader_threads = threads;
  o.max_reported_problems = 0;
  Loader loader(o, 0, 1);
  const int64_t per_step = static_cast<int64_t>(o.global_batch) * (o.seq_len + 1);
  // One epoch: the byte tokenizer makes ~1 token per corpus byte (+1 end-of-text a document).
  const int64_t steps = static_cast<int64_t>(loader.corpus().size_bytes()) / per_step;
  const double t0 = hlp::now_s();
  int64_t checksum = 0, hwm_half = 0;
  for (int64_t s = 0; s < steps; ++s) {
    checksum += loader.next().tokens[0];
    if (s == steps / 2) hwm_half = proc_status_bytes("VmHWM");
  }
  const double dt = hlp::now_s() - t0;
  std::printf("%lld %lld %lld %lld %.3f %.3f %lld\n", static_cast<long long>(rss_before),
              static_cast<long long>(hwm_half), static_cast<long long>(proc_status_bytes("VmHWM")),
              static_cast<long long>(steps * per_step), dt, loader.total_wait_s(),
              static_cast<long long>(checksum));
  return 0;
}

std::string run_child(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  return (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) ? out : "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string root = HLP_SOURCE_DIR_DEFAULT;
  if (const char* s = std::getenv("HLP_SOURCE_DIR")) root = s;
  std::string sample = root + "/datasets/sample/corpus.txt";
  std::string spm = root + "/datasets/sample/spm.model";
  std::string hf_json = HLP_QWEN3_TOKENIZER_DEFAULT;
  std::string gen_dir = "/tmp/hlp-bench-data";
  std::vector<int64_t> sizes_mib = {1024, 2048};
  double seconds = 3.0;
  bool keep = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw hlp::user_error(a, " needs a value");
        return argv[++i];
      };
      if (a == "--stream-only") {
        const std::string path = value();
        return stream_only(path, std::atoi(value().c_str()));
      } else if (a == "--sample") sample = value();
      else if (a == "--spm") spm = value();
      else if (a == "--hf-json") hf_json = value();
      else if (a == "--gen-dir") gen_dir = value();
      else if (a == "--seconds") seconds = std::atof(value().c_str());
      else if (a == "--keep") keep = true;
      else if (a == "--sizes-mib") {
        sizes_mib.clear();
        std::stringstream ss(value());
        std::string item;
        while (std::getline(ss, item, ',')) sizes_mib.push_back(std::atoll(item.c_str()));
      } else if (a == "-h" || a == "--help") {
        std::printf("usage: hlp-bench-data [--sample FILE] [--spm FILE] [--hf-json FILE] "
                    "[--gen-dir DIR] [--sizes-mib 1024,2048|''] [--seconds S] [--keep]\n");
        return 0;
      } else {
        throw hlp::user_error("unknown argument '", a, "' (see --help)");
      }
    }

    std::printf("# hlp-bench-data: loader throughput (read + tokenize + pack), %s\n", sample.c_str());
    std::printf("%-14s %8s %14s %18s %14s %16s %12s\n", "tokenizer", "threads", "tokens_per_s",
                "tokens_per_s_per_thread", "cpu_s_per_s", "tokens_per_cpu_s", "wait_s");
    const std::pair<std::string, std::string> tokenizers[] = {
        {"byte", "byte"}, {"sentencepiece", spm}, {"tokenizer.json", hf_json}};
    for (const auto& [label, tok] : tokenizers) {
      for (int threads : {1, 2}) {
        DataOptions o;
        o.path = sample;
        o.tokenizer = tok;
        o.seq_len = 1024;
        o.global_batch = 8;
        o.loader_threads = threads;
        const Rate r = measure_loader(o, seconds);
        std::printf("%-14s %8d %14.0f %18.0f %14.2f %16.0f %12.3f\n", label.c_str(), threads,
                    r.tokens_per_s, r.tokens_per_s / threads, r.cpu_per_wall,
                    r.tokens_per_s / r.cpu_per_wall, r.wait_s);
        std::fflush(stdout);
      }
    }
    const auto [cold, warm] = measure_encode(hf_json, sample);
    std::printf("# tokenizer.json encode() alone, 1 thread: %.0f tokens/s first pass (empty word "
                "cache), %.0f tokens/s second pass\n# target: >= 1 M tokens/s per loader thread\n",
                cold, warm);

    std::printf("\n# peak RSS while streaming one epoch of a generated corpus (byte, 2 threads, "
                "G=8, T=1024)\n");
    std::printf("%10s %14s %18s %14s %12s %14s %10s\n", "corpus_MiB", "rss_start_MiB",
                "peak_at_half_MiB", "rss_peak_MiB", "growth_MiB", "tokens_per_s", "wait_s");
    for (int64_t mib : sizes_mib) {
      const std::string dir = gen_dir + "/size-" + std::to_string(mib);
      if (!std::filesystem::exists(dir + "/.complete")) {
        std::filesystem::remove_all(dir);
        generate_corpus(sample, dir, mib);
        std::ofstream(dir + "/.complete") << "ok\n";
      }
      const std::string out = run_child({"hlp-bench-data", "--stream-only", dir, "2"});
      long long rss0 = 0, hwm_half = 0, hwm = 0, tokens = 0, checksum = 0;
      double dt = 0, wait = 0;
      if (std::sscanf(out.c_str(), "%lld %lld %lld %lld %lf %lf %lld", &rss0, &hwm_half, &hwm,
                      &tokens, &dt, &wait, &checksum) != 7) {
        std::fprintf(stderr, "hlp-bench-data: streaming child failed for %s\n", dir.c_str());
        return 1;
      }
      std::printf("%10lld %14.1f %18.1f %14.1f %12.1f %14.0f %10.3f\n", static_cast<long long>(mib),
                  rss0 / 1048576.0, hwm_half / 1048576.0, hwm / 1048576.0, (hwm - rss0) / 1048576.0,
                  tokens / dt, wait);
      std::fflush(stdout);
      if (!keep) std::filesystem::remove_all(dir);
    }
    std::printf("# target: growth_MiB < 64 and independent of corpus size\n");
  } catch (const hlp::UserError& e) {
    std::fprintf(stderr, "hlp-bench-data: %s\n", e.what());
    return 2;
  }
  return 0;
}
