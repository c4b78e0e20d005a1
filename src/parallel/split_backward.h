#pragma once
// The backward of one micro-batch through one pipeline chunk, split into B (gradients of the
// activations, down to the chunk's input) and W (gradients of the trainable parameters), for
// the zero-bubble schedules (pipeline_schedule.h).
//
// How, on LibTorch's autograd graph (the approach of torch.distributed.pipelining's
// stage_backward_input / stage_backward_weight):
//   - A node is parameter-side when all its next edges lead to trainable parameters, directly or
//     through other parameter-side nodes (a transpose or a dtype cast of a weight). A node that
//     is not, but has a parameter-side edge, is a weight node: the matmul (or norm, ...) that
//     both propagates an activation gradient and produces a parameter gradient.
//   - B runs the engine from the chunk's output to its input and captures the gradient arriving
//     at every weight node. Weight gradients are not needed there, so the nodes compute only
//     their activation outputs (autograd's should_compute_output mask). The graph is kept.
//   - W re-enters the engine at each weight node with its captured gradient and asks only for
//     the parameters behind its parameter-side edges, accumulating into their .grad. The node
//     now computes only its parameter outputs, from the same inputs as the fused backward: the
//     gradients are bit-identical (tests/parallel/test_split_backward.cpp, float64).
// For LoRA, W is the adapters' products only (the frozen base weights have no W); in full
// finetuning it is every weight's.
// Not supported: a parameter used twice in one chunk (a tied matrix inside one chunk) and
// activation checkpointing (its recompute runs a fused backward inside B): both UserError.
#include <torch/torch.h>

#include <vector>

#include "parallel/autograd_node.h"

namespace hlp::parallel {

class SplitBackward {
 public:
  // B: backpropagates `root` seeded with `seed` down to `input` (undefined on the first chunk)
  // without the weight gradients of `params` (the chunk's trainable parameters). Returns
  // d root / d input (undefined when `input` is). Keeps what W needs.
  torch::Tensor backward_input(const torch::Tensor& root, const torch::Tensor& seed,
                               const torch::Tensor& input,
                               const std::vector<torch::Tensor>& params);
  // W: the weight gradients of the last B, accumulated into the parameters' .grad; then frees
  // the micro-batch's graph.
  void backward_weight();
  bool pending() const { return root_.defined(); }

 private:
  struct WeightNode {
    NodePtr node;
    std::vector<uint32_t> input_nrs;   // inputs of `node` that received a gradient in B
    std::vector<torch::Tensor> grads;  // ... and those gradients
    std::vector<NodePtr> accumulators;  // its parameters
  };
  std::vector<WeightNode> weight_nodes_;
  torch::Tensor root_;  // keeps the graph alive from B to W
};

}  // namespace hlp::parallel
