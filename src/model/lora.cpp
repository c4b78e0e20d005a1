#include "model/lora.h"

#include "common/error.h"
#include "model/accounting.h"
#include "model/autocast_state.h"
#include "model/init.h"

namespace hlp::model {

namespace {

bool is_adapter_name(const std::string& name) {
  return name_has_suffix(name, "lora_A") || name_has_suffix(name, "lora_B");
}

}  // namespace

LoraReport apply_lora(HybridLM& model, const LoraConfig& lora) {
  lora.validate();
  LoraReport report;
  if (!lora.full_finetune()) {
    bool any = false;
    for (const auto& lin : linear_table(model->config())) any = any || lora.targets_module(lin.module);
    if (!any)
      throw user_error("--lora-targets selects no projection of model ", model->config().name,
                       ": projection names end in q_proj k_proj v_proj o_proj (attention and "
                       "gated delta), g_proj a_proj b_proj (gated delta), gate_proj up_proj "
                       "down_proj (MLP)");
    for (auto& [name, linear] : model->named_linears()) {
      if (!lora.targets_module(name)) continue;
      linear->enable_lora(lora.rank, lora.alpha, lora.dropout);
      init_parameter(name + ".lora_A", linear->lora_A, model->seed());
      init_parameter(name + ".lora_B", linear->lora_B, model->seed());
      ++report.adapted_modules;
    }
  }
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    const bool trainable =
        lora.full_finetune() || is_adapter_name(item.key()) || lora.saves_parameter(item.key());
    item.value().set_requires_grad(trainable);
    report.total_params += item.value().numel();
    if (trainable) report.trainable_params += item.value().numel();
  }
  return report;
}

void store_parameter(const torch::Tensor& param, BaseDtype base) {
  if (!stored_in_base_dtype(param.requires_grad(), param.dim())) return;
  const at::ScalarType dtype = scalar_type(base);
  if (param.scalar_type() == dtype) return;
  torch::NoGradGuard no_grad;
  torch::Tensor p = param;  // same TensorImpl: the module keeps its parameter
  p.set_data(p.detach().to(dtype));
}

void store_frozen_weights(torch::nn::Module& model, BaseDtype base) {
  for (const auto& p : model.parameters(/*recurse=*/true)) store_parameter(p, base);
}

void merge_lora(HybridLM& model) {
  for (auto& [name, linear] : model->named_linears()) linear->merge();
}

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace hlp::model
