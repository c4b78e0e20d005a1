#include "train/hf_weights.h"

#include <filesystem>
#include <set>

#include "common/clock.h"
#include "common/error.h"
#include "metrics/cpu_allocator_counter.h"
#include "model/hf/checkpoint.h"
#include "model/hf/peft.h"

namespace hlp::train {
namespace {

WeightLoadReport load_into(const model::hf::HfCheckpoint& ckpt,
                           const std::vector<model::hf::ExpectedTensor>& expected,
                           parallel::Strategy& strategy) {
  WeightLoadReport r;
  const auto held = strategy.held_tensors();
  for (const auto& h : held) r.bytes_held += h.local.nbytes();
  r.bytes_written = model::hf::load_held(ckpt, expected, held);
  std::set<std::string> names, loaded;  // a TP slice of q | k | v blocks is several HeldTensors
  for (const auto& e : expected) names.insert(e.hlp_name);
  for (const auto& h : held)
    if (names.count(h.name)) loaded.insert(h.name);
  r.tensors = int64_t(loaded.size());
  return r;
}

}  // namespace

WeightLoadReport init_from_checkpoint(const std::string& path, const model::ModelConfig& config,
                                      parallel::Strategy& strategy) {
  const int64_t before = metrics::CpuAllocatorCounter::current_bytes();
  const int64_t peak_before = metrics::CpuAllocatorCounter::peak_bytes();
  metrics::CpuAllocatorCounter::reset_peak();
  const double t0 = now_s();
  model::hf::HfCheckpoint ckpt(path);
  const auto expected = model::hf::expected_base_tensors(config);
  const int64_t left_out = model::hf::check_against(
      ckpt, expected, model::hf::ignorable_base_tensors(config), "--init-from checkpoint");
  WeightLoadReport r = load_into(ckpt, expected, strategy);
  r.tensors_left_out = left_out;
  r.seconds = now_s() - t0;
  r.allocated_before = before;
  r.peak_before = peak_before;
  r.peak_during = metrics::CpuAllocatorCounter::peak_bytes();
  return r;
}

WeightLoadReport load_adapter(const std::string& dir, const model::ModelConfig& config,
                              const model::LoraConfig& lora, parallel::Strategy& strategy) {
  const double t0 = now_s();
  model::hf::HfCheckpoint ckpt(dir);
  const auto expected = model::hf::expected_adapter_tensors(config, lora);
  model::hf::check_against(ckpt, expected, {}, "--load-adapter");
  WeightLoadReport r = load_into(ckpt, expected, strategy);
  r.seconds = now_s() - t0;
  return r;
}

std::map<std::string, torch::Tensor> gather_adapter(const model::ModelConfig& config,
                                                    const model::LoraConfig& lora,
                                                    parallel::Strategy& strategy,
                                                    comm::Communicator& world) {
  return gather_whole(model::hf::expected_adapter_tensors(config, lora), strategy, world);
}

std::map<std::string, torch::Tensor> gather_whole(const std::vector<model::hf::ExpectedTensor>& expected,
                                                  parallel::Strategy& strategy,
                                                  comm::Communicator& world) {
  // One flat buffer [sum of numels]: each whole tensor is a view of it.
  int64_t numel = 0;
  for (const auto& e : expected) {
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    numel += n;
  }
  torch::Tensor flat = torch::zeros({numel});
  std::map<std::string, torch::Tensor> whole;
  int64_t offset = 0;
  for (const auto& e : expected) {
    int64_t n = 1;
    for (int64_t s : e.shape) n *= s;
    whole[e.hlp_name] = flat.narrow(0, offset, n).view(e.shape);
    offset += n;
  }
  torch::NoGradGuard no_grad;
  for (const auto& h : strategy.held_tensors()) {
    auto it = whole.find(h.name);
    if (it == whole.end() || !h.primary) continue;
    torch::Tensor dst = it->second;
    for (size_t d = 0; d < h.region.size.size(); ++d)
      dst = dst.narrow(int64_t(d), h.region.begin[d], h.region.size[d]);
    dst.copy_(h.local);
  }
  world.all_reduce(flat, comm::ReduceOp::Sum);  // exactly one primary holder per element
  return whole;
}

void save_adapter(const std::string& dir, const model::ModelConfig& config,
                  const model::LoraConfig& lora, const std::string& base_model_name_or_path,
                  parallel::Strategy& strategy, comm::Communicator& world) {
  if (lora.full_finetune())
    throw user_error("--save-adapter needs LoRA (--lora-rank > 0); a full finetune has no adapter");
  auto whole = gather_adapter(config, lora, strategy, world);
  if (world.rank() == 0) model::hf::write_peft_adapter(dir, whole, config, lora, base_model_name_or_path);
  world.barrier();
}

void save_merged(const std::string& dir, const model::ModelConfig& config,
                 const model::LoraConfig& lora, const std::string& config_json,
                 parallel::Strategy& strategy, comm::Communicator& world) {
  const auto adapters = lora.full_finetune() ? std::map<std::string, torch::Tensor>{}
                                             : gather_adapter(config, lora, strategy, world);
  std::vector<std::pair<std::string, torch::Tensor>> merged;  // rank 0: (HF name, tensor)
  for (const auto& e : model::hf::expected_base_tensors(config)) {
    auto whole = gather_whole({e}, strategy, world).at(e.hlp_name);  // one tensor at a time
    if (world.rank() != 0) continue;
    const std::string module = e.hlp_name.substr(0, e.hlp_name.rfind('.'));
    auto a = adapters.find(module + ".lora_A");
    if (e.hlp_name == module + ".weight" && a != adapters.end())
      whole += lora.scale() * torch::matmul(adapters.at(module + ".lora_B"), a->second);
    if (e.offset != 0.0) whole = whole - e.offset;  // back to the checkpoint's convention
    merged.emplace_back(e.file_name, whole.clone());
  }
  if (world.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw user_error("--save-merged: cannot create '", dir, "': ", ec.message());
    model::hf::write_safetensors(dir + "/model.safetensors", merged, {{"format", "pt"}});
    if (!config_json.empty()) {
      std::filesystem::path from = config_json;
      if (std::filesystem::is_directory(from)) from /= "config.json";
      std::filesystem::copy_file(from, std::filesystem::path(dir) / "config.json",
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  world.barrier();
}

}  // namespace hlp::train
