#pragma once
// apply_lora: turns a HybridLM (whole or a part) into a LoRA finetuning model in place.
//   rank 0  -> full finetune: every parameter requires grad, no adapters.
//   rank r  -> every projection selected by LoraConfig (PEFT suffix / regex rules, see
//              lora_config.h) gets lora_A [r, in] (kaiming-uniform, drawn from
//              hash(seed, "<module>.lora_A")) and lora_B [out, r] = 0; then only adapters and
//              the parameters of modules_to_save require grad.
// The same selection drives accounting.h, so count_parameters(config, lora).trainable equals the
// trainable numel of the whole model after apply_lora.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/hybrid_lm.h"
#include "model/lora_config.h"
#include "model/precision.h"

namespace hlp::model {

struct LoraReport {
  int64_t adapted_modules = 0;   // projections that got an adapter (in this model part)
  int64_t trainable_params = 0;  // numel with requires_grad (this part)
  int64_t total_params = 0;      // numel of all parameters (this part)
};

// Throws hlp::UserError if the targets select no projection of the full config (so every
// pipeline stage agrees, even one without matching layers).
LoraReport apply_lora(HybridLM& model, const LoraConfig& lora);

// Stores `param` in the base dtype when precision.h's rule says so (a frozen matrix: call after
// apply_lora decided what trains); otherwise leaves it. `base` resolved. The same for every
// parameter of a model (drawn values) and one at a time (deferred values, as a strategy
// materialises them).
void store_parameter(const torch::Tensor& param, BaseDtype base);
void store_frozen_weights(torch::nn::Module& model, BaseDtype base);

// W += (alpha / r) B A for every adapted projection (forward then skips the adapters).
void merge_lora(HybridLM& model);

// The parameters with requires_grad, in named_parameters() order (what the optimizer gets).
std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module);

}  // namespace hlp::model
