#pragma once
// An owning pointer to a LibTorch autograd node (an AccumulateGrad, a MmBackward, ...):
// std::shared_ptr<Node> in LibTorch 1.13 and 2.6 (Node derives from enable_shared_from_this),
// c10::intrusive_ptr<Node> in 2.14 (Node derives from intrusive_ptr_target). Spelled as the
// type of Edge::function, which holds that pointer in every version, so no version test.
// function.h: the complete Node, which destroying an intrusive_ptr<Node> needs.
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>

namespace hlp::parallel {

using NodePtr = decltype(torch::autograd::Edge::function);

}  // namespace hlp::parallel
