#include "launch.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/clock.h"
#include "common/error.h"

extern char** environ;

namespace hlp::sweep {
namespace fs = std::filesystem;

// Runs argv in `cwd`, stdout+stderr appended to `log_path` (or captured into *captured).
// Returns the exit status (128+signal when killed).
int run_process(const std::vector<std::string>& argv, const std::string& log_path, std::string* captured) {
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (captured) {
    if (pipe(pipe_fds) != 0) throw user_error("cannot create a pipe to run ", argv[0]);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  } else {
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (captured) close(pipe_fds[1]);
  if (err != 0) {
    if (captured) close(pipe_fds[0]);
    throw user_error("cannot start '", argv[0], "': ", std::strerror(err));
  }
  if (captured) {
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipe_fds[0], buffer, sizeof buffer)) > 0) captured->append(buffer, static_cast<size_t>(n));
    close(pipe_fds[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

namespace {

// The line of a failed run's log that says why: the last "error:" line (hlp-train's one-line
// errors), else MPICH's "terminated with the exit string" line, else the last non-empty line.
std::string reason_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last = "(empty log)", error, terminated;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r=") == std::string::npos) continue;
    last = line;
    if (line.find("error:") != std::string::npos) error = line;
    if (line.find("TERMINATED WITH THE EXIT STRING") != std::string::npos) terminated = line;
  }
  return !error.empty() ? error : !terminated.empty() ? terminated : last;
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? "(no output)" : line;
}

// sbatch --parsable prints "<id>" or "<id>;<cluster>".
std::string sbatch(const std::vector<std::string>& args, const std::string& script, const std::string& dir) {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--chdir=" + dir};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back((fs::path(dir) / script).string());
  std::string output;
  int status = run_process(argv, "", &output);
  std::string id = output.substr(0, output.find_first_of(";\n"));
  bool numeric = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
  if (status != 0 || !numeric)
    throw user_error("sbatch ", script, " failed (exit ", status, "): ", first_line(output),
                     " (is Slurm reachable? for a local one: bash slurm/local-cluster.sh up)");
  return id;
}

}  // namespace

std::vector<SubmittedJob> submit_sweep(const Sweep& sweep, const RenderedSweep& rendered) {
  std::vector<SubmittedJob> jobs;
  std::string dependency, submitted;  // submitted: "12 13" for the message if a later sbatch fails
  try {
    for (const std::string& script : rendered.array_scripts) {
      jobs.push_back({"array", script, sbatch({}, script, rendered.sweep_dir)});
      dependency += (dependency.empty() ? "" : ":") + jobs.back().job_id;
      submitted += (submitted.empty() ? "" : " ") + jobs.back().job_id;
    }
    jobs.push_back({"analysis", rendered.analysis_script,
                    sbatch({"--dependency=afterany:" + dependency}, rendered.analysis_script, rendered.sweep_dir)});
  } catch (const UserError& e) {
    if (submitted.empty()) throw;
    throw user_error(e.what(), "; already submitted: ", submitted, " (scancel ", submitted, ")");
  }
  std::ofstream out(fs::path(rendered.sweep_dir) / "submitted.txt");
  for (const SubmittedJob& job : jobs) out << job.kind << " " << job.script << " " << job.job_id << "\n";
  return jobs;
}

int run_sweep_locally(const Sweep& sweep, const RenderedSweep& rendered, const LocalRunOptions& options) {
  const fs::path dir(rendered.sweep_dir);
  fs::create_directories(rendered.results_dir);
  const std::string train = (fs::path(options.hlp_bin) / "hlp-train").string();
  const std::string analyze = (fs::path(options.hlp_bin) / "hlp-analyze").string();
  if (access(train.c_str(), X_OK) != 0)
    throw user_error("no executable hlp-train in '", options.hlp_bin, "' (build it, or pass --hlp-bin DIR)");

  int failed = 0;
  const size_t total = sweep.configs.size();
  const double sweep_start_s = now_s();
  for (size_t i = 0; i < total; ++i) {
    const Config& config = sweep.configs[i];
    const fs::path log = dir / "logs" / (config.name + ".log");
    const fs::path checkpoint = dir / "checkpoints" / config.name;
    fs::remove_all(checkpoint);  // a local run always starts fresh
    fs::create_directories(checkpoint);
    fs::remove(log);
    std::cout << "[" << i + 1 << "/" << total << "] " << config.label << " ... " << std::flush;
    const double start_s = now_s();
    int status = run_process({options.mpiexec, "-n", std::to_string(config.ranks), train, "--config",
                              (dir / "configs" / (config.name + ".ini")).string(), "--out",
                              (fs::path(rendered.results_dir) / (config.name + ".h5")).string(),
                              "--checkpoint-dir", checkpoint.string()},
                             log.string(), nullptr);
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", now_s() - start_s);
    if (status == 0) {
      std::cout << "ok " << seconds << "\n";
    } else {
      ++failed;
      std::cout << "FAILED (exit " << status << ") " << seconds << ": " << reason_line(log.string())
                << " (log: " << log.string() << ")\n";
    }
  }
  std::printf("%zu of %zu configurations ok in %.1f s\n", total - failed, total, now_s() - sweep_start_s);
  if (static_cast<size_t>(failed) == total) {
    std::cout << "no results to analyse\n";
    return failed;
  }
  if (access(analyze.c_str(), X_OK) != 0) {
    std::cout << "[analysis] no executable hlp-analyze in " << options.hlp_bin << "; the results are in "
              << rendered.results_dir << " (later: hlp-analyze report " << rendered.results_dir << " -o "
              << rendered.report_dir << ")\n";
    return failed + 1;
  }
  const fs::path log = dir / "logs" / (sweep.name + "-analyze.log");
  fs::remove(log);
  std::cout << "[analysis] hlp-analyze report " << rendered.results_dir << " -o " << rendered.report_dir << " ... "
            << std::flush;
  int status = run_process({analyze, "report", rendered.results_dir, "-o", rendered.report_dir,
                            "--sweep", rendered.sweep_dir},
                           log.string(), nullptr);
  if (status != 0) {
    std::cout << "FAILED (exit " << status << "), log: " << log.string() << "\n";
    return failed + 1;
  }
  std::cout << "ok\nreport: " << rendered.report_dir << "\n";
  return failed;
}

}  // namespace hlp::sweep
