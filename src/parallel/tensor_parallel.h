#pragma once
// Megatron-style tensor parallelism, applied to a (part of a) HybridLM from outside.
//
// Each block half (mixer, MLP) becomes   y = x + g(half(f(norm(x))))   where
//   f = copy_to_tp_region:     forward identity,              backward all-reduce (sum) over tp
//   g = reduce_from_tp_region: forward all-reduce (sum) over tp, backward identity
// so there is exactly one all-reduce forward and one backward per block half.
//
// Slicing (rank t of T takes the t-th of T equal, contiguous pieces; heads stay whole):
//   column-parallel (outputs split): q_proj k_proj v_proj (attention and gated delta), a_proj
//     b_proj g_proj, gate_proj up_proj, JetBlock kernel_generator.w2; also the per-head / per-
//     channel tensors that follow them: A_log, dt_bias, q/k/v_conv1d.weight.
//       weight [out/T, in], bias [out/T], lora_B [out/T, r]; lora_A [r, in] REPLICATED
//   row-parallel (inputs split): o_proj (attention and gated delta), down_proj.
//       weight [out, in/T], lora_A [r, in/T]; lora_B [out, r] REPLICATED (no bias allowed)
//   LoRA choice: the adapter follows its base: B split with a column-parallel base (A
//   replicated), A split with a row-parallel base (B replicated). Then x A^T B_t^T is exactly
//   the t-th output slice, and sum_t x_t A_t^T = x A^T, so the sharded model computes the
//   same function with no extra communication. The replicated factor (and every other
//   replicated tensor inside a mixer or MLP: GDN o_norm.weight, JetBlock kernel_generator.w1)
//   only sees this rank's heads, so its gradient is a partial sum: Placement::Partial, summed
//   over tp after backward.
//   Qwen3.5 / Qwen3-Next Gated DeltaNet (in_proj_* column-parallel, out_proj row-parallel,
//   conv1d per channel, norm.weight Partial): in_proj_qkv's rows and conv1d's channels are three
//   blocks q | k | v (each key heads x dk or value heads x dv); a rank keeps the t-th piece of
//   each block, so its slice is its key heads' q, k and its value heads' v (tp_segments). Value
//   head h reads key head h / (H / Hk): contiguous value heads t use contiguous key heads t. The
//   fused in_proj_qkvz / in_proj_ba are laid out per key head already: one piece.
//   Embedding, norms outside the halves and the LM head stay replicated (Placement::Replicated):
//   their gradients are already identical on every tp rank (the residual stream is).
//   LoRA dropout > 0 would draw different masks on partners for the replicated input of a
//   column-parallel adapter; tp requires --lora-dropout 0 (checked).
// Activation checkpointing is not combined with tp > 1 (checked).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/hybrid_lm.h"

namespace hlp::parallel {

torch::Tensor copy_to_tp_region(const torch::Tensor& x, comm::Communicator* tp_comm);      // f
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, comm::Communicator* tp_comm);  // g

enum class TpPlacement { Replicated, Sharded, Partial };

// Where a parameter of the model lives under tensor parallelism (by its full name).
TpPlacement tp_placement(const std::string& name);
// Dimension along which tensor parallelism slices the parameter `name` (-1: not sliced).
// (What --tp refuses, heads or MLP width it does not divide and so on, is the registry's:
// check_axis(MeshAxis::TP, ...), registry.h.)
int64_t tp_split_dim(const std::string& name);

// One run of a tensor-parallel slice along tp_split_dim: `length` rows of the slice from
// local_begin are the whole tensor's from whole_begin.
struct TpSegment {
  int64_t local_begin, whole_begin, length;
};
// The runs rank t of tp keeps of parameter `name` whose whole size along the split dimension is
// `whole`: the t-th of tp equal pieces, or for a tensor of blocks (Qwen3.5's q | k | v) the t-th
// piece of each block, in order. Throws hlp::UserError when tp does not divide a block.
std::vector<TpSegment> tp_segments(const std::string& name, const model::ModelConfig& config,
                                   int64_t whole, int tp, int t);

class TensorParallel {
 public:
  // For tp_comm->rank() of tp_comm->size() over a model of `config`. Throws hlp::UserError when
  // a head count or the MLP width is not divisible by the tp size (or tp > 1 meets activation
  // checkpointing or LoRA dropout).
  TensorParallel(const model::ModelConfig& config, std::shared_ptr<comm::Communicator> tp_comm,
                 double lora_dropout);

  // Keeps this rank's slice of parameter `name` in place (set_data; the whole tensor's bytes go
  // with it). No-op for size 1 and for replicated tensors. Called one parameter at a time while
  // the stage is built, so a rank never holds more than its slices plus one whole parameter.
  void slice(const std::string& name, const torch::Tensor& param) const;

  // One block: [B, T, D] -> [B, T, D] (plain block->forward when tp size is 1).
  torch::Tensor block_forward(model::Block block, const torch::Tensor& x) const;

  int size() const { return tp_comm_->size(); }
  comm::Communicator& comm() const { return *tp_comm_; }

 private:
  model::ModelConfig config_;
  std::shared_ptr<comm::Communicator> tp_comm_;
};

}  // namespace hlp::parallel
