#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/Resize.h>

#include <cmath>

namespace hlp::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return splitmix64(splitmix64(seed) ^ h);
}

void init_parameter(const std::string& name, torch::Tensor& param, uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(parameter_seed(seed, name));
  // A float32 contiguous parameter is drawn into directly (same generator calls on the same
  // shape, so the same values): no second whole-parameter buffer while a model is built.
  const bool in_place = param.scalar_type() == torch::kFloat32 && param.is_contiguous();
  auto values = in_place ? param : torch::empty(param.sizes(), torch::kFloat32);
  if (ends_with(name, "kernel_generator.w2.weight")) {
    values.zero_();
  } else if (ends_with(name, "kernel_generator.w2.bias")) {
    values.normal_(0.0, 0.02, gen);
  } else if (ends_with(name, ".lora_B") || (ends_with(name, ".bias") && !ends_with(name, "dt_bias"))) {
    values.zero_();
  } else if (ends_with(name, ".lora_A")) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(param.size(1)));
    values.uniform_(-bound, bound, gen);
  } else if (ends_with(name, "norm.weight")) {
    values.fill_(1.0);
  } else if (ends_with(name, "conv1d.weight")) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(param.size(-1)));
    values.uniform_(-bound, bound, gen);
  } else if (ends_with(name, ".A_log")) {
    values.uniform_(0.0, 16.0, gen);
    values = values.clamp_min(1e-4).log();
  } else if (ends_with(name, ".dt_bias")) {
    const double dt_min = 1e-3, dt_max = 0.1;
    values.uniform_(0.0, 1.0, gen);
    auto dt = (values * (std::log(dt_max) - std::log(dt_min)) + std::log(dt_min)).exp();
    dt = dt.clamp_min(1e-4);
    values = dt + torch::log(-torch::expm1(-dt));  // softplus^-1
  } else {
    values.normal_(0.0, 0.02, gen);
  }
  if (!values.is_same(param)) param.copy_(values);
}

void release_parameter(const torch::Tensor& param) {
  at::native::resize_bytes_cpu(param.storage().unsafeGetStorageImpl(), 0);
}

bool has_values(const torch::Tensor& param) {
  const int64_t needed = (param.storage_offset() + param.numel()) * int64_t(param.element_size());
  return int64_t(param.storage().nbytes()) >= needed;
}

void materialise_parameter(const std::string& name, const torch::Tensor& param, uint64_t seed) {
  if (has_values(param)) return;
  TORCH_CHECK(param.is_contiguous() && param.storage_offset() == 0,
              "materialise_parameter: ", name, " is not a whole contiguous parameter");
  at::native::resize_bytes_cpu(param.storage().unsafeGetStorageImpl(),
                               size_t(param.numel()) * param.element_size());
  torch::Tensor p = param;  // init_parameter writes through the same TensorImpl
  init_parameter(name, p, seed);
}

}  // namespace hlp::model
