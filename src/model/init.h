#pragma once
// Deterministic parameter initialisation: the value of every parameter is a function of
// (seed, full parameter name) only, never of construction order. A pipeline stage that builds
// blocks 7..13, a tensor-parallel shard, or the single-process model therefore hold identical
// values for "blocks.9.mixer.q_proj.weight" for the same seed.
//
// Each parameter draws from its own CPU generator seeded with parameter_seed(seed, name), in
// float32, then is copied into the parameter's dtype (a float64 model = the float32 values).
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace hlp::model {

// splitmix64(seed ^ FNV-1a-64(name)).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

// Rule by name (Qwen2 / fla / PEFT conventions):
//   *kernel_generator.w2.weight           zeros (JetBlock: the kernel starts static = w2.bias)
//   *kernel_generator.w2.bias             N(0, 0.02) (JetBlock's static-kernel init)
//   *.lora_B, *.bias, except dt_bias      zeros
//   *.lora_A                               kaiming-uniform a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))
//   *norm.weight                           ones
//   *conv1d.weight  [C, 1, W]              U(-1/sqrt(W), 1/sqrt(W))  (nn.Conv1d default)
//   *.A_log                                log(U(0, 16))
//   *.dt_bias                              inverse-softplus(dt), dt log-uniform in [1e-3, 0.1]
//   everything else (projections, embedding)  N(0, 0.02)
void init_parameter(const std::string& name, torch::Tensor& param, uint64_t seed);

}  // namespace hlp::model
