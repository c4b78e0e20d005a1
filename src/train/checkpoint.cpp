#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <atomic>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/os_error.h"

namespace fs = std::filesystem;

namespace hlp::train {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

std::string step_dir(const std::string& dir, int64_t step) {
  return dir + "/step_" + std::to_string(step);
}

std::string rank_stem(const std::string& sdir, int rank) {
  return sdir + "/rank_" + std::to_string(rank);
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}
bool stop_signal_received() { return g_stop.load(); }
void clear_stop_signal() { g_stop.store(false); }

void save_checkpoint(const std::string& dir, comm::Communicator& world, const AdamW& optimizer,
                     const CheckpointMeta& meta) {
  const std::string sdir = step_dir(dir, meta.next_step);
  std::error_code ec;
  fs::create_directories(sdir, ec);
  if (ec) throw IoError("--checkpoint-dir: cannot create '" + sdir + "': " + os_error_text(ec.value()),
                       ec.value());
  const std::string stem = rank_stem(sdir, world.rank());

  // Host copies: a checkpoint does not depend on the device it was written from (a CPU run
  // resumes on a GPU and back; load_checkpoint copies into whatever device the slots are on).
  auto host_copy = [](const at::Tensor& t) {
    return t.device().is_cpu() ? t.detach().clone() : t.detach().to(at::kCPU);
  };
  std::vector<at::Tensor> tensors;
  for (const auto& slot : optimizer.slots()) tensors.push_back(host_copy(slot.param));
  for (const auto& t : optimizer.state_tensors())
    tensors.push_back(t.device().is_cpu() ? t : host_copy(t));
  tensors.push_back(at::detail::getDefaultCPUGenerator().get_state());
  // Serialized in memory, then each file written whole or not at all (common/atomic_file.h):
  // a write that fails (disk full, quota, I/O error) throws IoError naming the file and the
  // reason, before `latest` moves, so the previous checkpoint stays the one a resume finds.
  std::ostringstream tensor_bytes;
  torch::save(tensors, tensor_bytes);
  std::ostringstream meta_out;
  {
    meta_out << "next_step " << meta.next_step << "\nstrategy " << meta.strategy
             << "\nmesh " << meta.mesh
             << "\npp_split " << (meta.pp_split.empty() ? "-" : meta.pp_split)
             << "\nslots " << optimizer.slots().size()
             << "\nadam_steps " << optimizer.step_count();
    char scale[40];
    std::snprintf(scale, sizeof(scale), "%.17g", meta.loss_scale);  // exact
    meta_out << "\nloss_scale " << scale << "\nloss_scale_clean_steps "
             << meta.loss_scale_clean_steps << "\ncursor " << meta.data_cursor << "\n";
  }
  write_file_atomically(stem + ".pt", tensor_bytes.str());
  write_file_atomically(stem + ".txt", meta_out.str());
  world.barrier();  // every rank's files exist before `latest` points at them
  if (world.rank() == 0)
    write_file_atomically(dir + "/latest", "step_" + std::to_string(meta.next_step) + "\n");
  world.barrier();
}

std::optional<CheckpointMeta> find_checkpoint(const std::string& dir, int rank,
                                              const std::string& strategy,
                                              const std::string& mesh) {
  std::ifstream latest(dir + "/latest");
  std::string name;
  if (!(latest >> name)) return std::nullopt;
  const std::string stem = rank_stem(dir + "/" + name, rank);
  std::ifstream in(stem + ".txt");
  if (!in) throw user_error("checkpoint ", dir, "/", name, " has no file for rank ", rank,
                            " (was it written with fewer ranks?)");
  CheckpointMeta meta;
  std::string key, line;
  while (in >> key) {
    std::getline(in >> std::ws, line);
    if (key == "next_step") meta.next_step = std::stoll(line);
    else if (key == "strategy") meta.strategy = line;
    else if (key == "mesh") meta.mesh = line;
    else if (key == "pp_split") meta.pp_split = line == "-" ? "" : line;
    else if (key == "cursor") meta.data_cursor = line;
    else if (key == "adam_steps") meta.adam_steps = std::stoll(line);
    else if (key == "loss_scale") meta.loss_scale = std::stod(line);
    else if (key == "loss_scale_clean_steps") meta.loss_scale_clean_steps = std::stoll(line);
  }
  if (meta.strategy != strategy || meta.mesh != mesh)
    throw user_error("checkpoint ", dir, "/", name, " was written by strategy ", meta.strategy,
                     " on mesh ", meta.mesh, "; this job runs ", strategy, " on mesh ", mesh,
                     " (use another --checkpoint-dir or the same layout)");
  return meta;
}

void load_checkpoint(const std::string& dir, int rank, const CheckpointMeta& meta,
                     AdamW& optimizer) {
  const std::string stem = rank_stem(step_dir(dir, meta.next_step), rank);
  std::vector<at::Tensor> tensors;
  torch::load(tensors, stem + ".pt");
  const size_t n = optimizer.slots().size();
  if (tensors.size() != 3 * n + 1)
    throw user_error("checkpoint ", stem, ".pt holds ", tensors.size(), " tensors, expected ",
                     3 * n + 1, " for this model and strategy");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i) optimizer.slots()[i].param.copy_(tensors[i]);
  std::vector<at::Tensor> state(tensors.begin() + long(n), tensors.begin() + long(3 * n));
  optimizer.load_state(state, meta.adam_steps >= 0 ? meta.adam_steps : meta.next_step);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(tensors.back());
}

}  // namespace hlp::train
