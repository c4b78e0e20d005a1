#pragma once
// LoRALinear: the one projection class of the model. Rank 0 is a plain linear layer; after
// enable_lora(r, alpha, dropout) it computes (PEFT's convention, docs/model-math.md, "LoRA")
//   y = x W^T + b + (alpha / r) * dropout(x) A^T B^T
// with W, b frozen by apply_lora and A [r, in], B [out, r] trainable (B = 0: a no-op at start).
//
// A frozen weight stored in bf16 / fp16 (--base-dtype, model/precision.h) is used as stored:
// the input is cast to its dtype, the adapters (float32 masters) see the input as it came.
//
// Tensor parallel finds every projection by name (HybridLM::named_linears) and may replace
// weight / bias / lora_A / lora_B with slices: forward() reads only the tensors, never the
// in/out sizes, so a column shard (rows of W, b, B) or a row shard (columns of W, A) just works.
#include <torch/torch.h>

#include <cstdint>

namespace hlp::model {

class LoRALinearImpl : public torch::nn::Module {
 public:
  LoRALinearImpl(int64_t in_features, int64_t out_features, bool with_bias);

  // x: [..., in] -> [..., out]
  torch::Tensor forward(const torch::Tensor& x);

  // Registers lora_A [r, in] and lora_B [out, r] in the weight's dtype, float32 for a 16-bit
  // weight (trainable masters). Values: A
  // kaiming-uniform (a = sqrt 5), B zeros; apply_lora re-draws A deterministically by name.
  void enable_lora(int64_t rank, double alpha, double dropout);
  bool has_lora() const { return rank_ > 0; }

  // W += (alpha / r) B A; the adapter is then skipped in forward until unmerge().
  void merge();
  void unmerge();
  bool merged() const { return merged_; }

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double scale() const { return scale_; }
  double dropout() const { return dropout_; }

  // Parameters, registered as "weight", "bias" (if any), "lora_A", "lora_B" (if rank > 0).
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined
  torch::Tensor lora_A;  // [r, in] or undefined
  torch::Tensor lora_B;  // [out, r] or undefined

 private:
  int64_t in_features_, out_features_;
  int64_t rank_ = 0;
  double alpha_ = 0, scale_ = 0, dropout_ = 0;
  bool merged_ = false;
};
TORCH_MODULE(LoRALinear);

}  // namespace hlp::model
