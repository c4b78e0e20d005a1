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

// Deferred values (HybridLM's Values::deferred): a parameter can exist with its shape and dtype
// but no bytes (its storage resized to 0, like a released FSDP parameter), so a strategy that
// keeps only rows or a slice of it never holds more than one whole parameter at a time.
void release_parameter(const torch::Tensor& param);     // drops its bytes; shape and dtype stay
bool has_values(const torch::Tensor& param);            // its storage holds all its elements
// Gives a released parameter its bytes and init_parameter's value for `name` — bit-identical to
// the value a model built with Values::drawn holds. No-op for a parameter that has its bytes
// (e.g. the LoRA factors, which apply_lora draws when it registers them).
void materialise_parameter(const std::string& name, const torch::Tensor& param, uint64_t seed);

}  // namespace hlp::model
