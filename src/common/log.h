#pragma once
// A binary's lines on stdout / stderr, aware of its MPI rank: progress and notices come from
// rank 0 once ("[hlp-train] step 3/20 ..."), lines about one rank from that rank
// ("[hlp-train] rank 1: ..."), warnings and errors on stderr ("hlp-train: warning: ...").
// Every line is flushed: a job killed by Slurm leaves what it printed.
#include <cstdarg>
#include <cstdio>
#include <string>

namespace hlp {

class Log {
 public:
  Log(std::string program, int rank) : program_(std::move(program)), rank_(rank) {}

  int rank() const { return rank_; }
  bool speaks() const { return rank_ == 0; }  // rank 0 speaks for the job

  // "[program] ..." on stdout, rank 0 only.
  void info(const char* format, ...) const __attribute__((format(printf, 2, 3))) {
    if (!speaks()) return;
    va_list args;
    va_start(args, format);
    line(stdout, "[" + program_ + "] ", format, args);
    va_end(args);
  }
  // "[program] rank N: ..." on stdout, every rank (what this rank did, e.g. what it loaded).
  void each_rank(const char* format, ...) const __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, format);
    line(stdout, "[" + program_ + "] rank " + std::to_string(rank_) + ": ", format, args);
    va_end(args);
  }
  // "program: warning: ..." on stderr, rank 0 only.
  void warning(const char* format, ...) const __attribute__((format(printf, 2, 3))) {
    if (!speaks()) return;
    va_list args;
    va_start(args, format);
    line(stderr, program_ + ": warning: ", format, args);
    va_end(args);
  }
  // "program: error: ..." on stderr, rank 0 only (the caller decides the exit).
  void error(const char* format, ...) const __attribute__((format(printf, 2, 3))) {
    if (!speaks()) return;
    va_list args;
    va_start(args, format);
    line(stderr, program_ + ": error: ", format, args);
    va_end(args);
  }

 private:
  static void line(std::FILE* to, const std::string& prefix, const char* format, va_list args) {
    std::string text = prefix;
    va_list copy;
    va_copy(copy, args);
    const int n = std::vsnprintf(nullptr, 0, format, copy);
    va_end(copy);
    if (n > 0) {
      std::string body(size_t(n) + 1, '\0');
      std::vsnprintf(body.data(), body.size(), format, args);
      body.resize(size_t(n));
      text += body;
    }
    text += '\n';
    std::fputs(text.c_str(), to);
    std::fflush(to);
  }

  std::string program_;
  int rank_ = 0;
};

}  // namespace hlp
