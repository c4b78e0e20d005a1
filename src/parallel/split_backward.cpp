// B / W split of a chunk's backward on LibTorch's autograd engine (split_backward.h).
#include "parallel/split_backward.h"

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"

namespace hlp::parallel {

namespace {

using torch::autograd::AccumulateGrad;
using torch::autograd::Edge;
using torch::autograd::Node;

enum class Kind : uint8_t { Other, Param, ParamSide };

// Every node reachable from `root`, children before parents (iterative: graphs of long stages
// are deep). Owning pointers: the weight nodes and accumulators are kept from B to W.
std::vector<NodePtr> post_order(const NodePtr& root) {
  std::vector<NodePtr> order;
  std::unordered_set<Node*> seen{root.get()};
  std::vector<std::pair<NodePtr, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->num_outputs()) {
      const NodePtr& child = node->next_edge(next++).function;
      if (child && seen.insert(child.get()).second) stack.emplace_back(child, 0);
      continue;
    }
    order.push_back(std::move(node));
    stack.pop_back();
  }
  return order;
}

}  // namespace

torch::Tensor SplitBackward::backward_input(const torch::Tensor& root, const torch::Tensor& seed,
                                            const torch::Tensor& input,
                                            const std::vector<torch::Tensor>& params) {
  if (pending()) throw std::logic_error("SplitBackward: B before the previous W");
  weight_nodes_.clear();
  const Edge root_edge = torch::autograd::impl::gradient_edge(root);
  if (!root_edge.is_valid()) throw std::logic_error("SplitBackward: the root has no graph");

  std::unordered_map<Node*, std::string> param_of;  // accumulator -> its parameter, for errors
  for (size_t i = 0; i < params.size(); ++i)
    if (auto acc = torch::autograd::impl::try_get_grad_accumulator(params[i]))
      param_of[acc.get()] = "parameter " + std::to_string(i);

  // Classify: parameter accumulators, parameter-side nodes, and everything else. A node whose
  // edges all lead to parameters but that two or more other nodes feed (the embedding lookup:
  // its output is used by a block's residual and its norm) receives an activation gradient,
  // the sum of theirs: it is a weight node itself, so it counts as Other (repeated until no
  // more such nodes appear, as a promotion can change its ancestors' kind).
  std::unordered_map<Node*, Kind> kind;
  std::unordered_set<Node*> merge_points;
  const std::vector<NodePtr> order = post_order(root_edge.function);
  for (bool changed = true; changed;) {
    kind.clear();
    for (const NodePtr& node : order) {
      Node* n = node.get();
      if (param_of.count(n)) {
        kind[n] = Kind::Param;
        continue;
      }
      bool param_side = n->num_outputs() > 0 && !dynamic_cast<AccumulateGrad*>(n) &&
                        !merge_points.count(n);
      for (size_t i = 0; param_side && i < n->num_outputs(); ++i) {
        Node* child = n->next_edge(i).function.get();
        param_side = child && kind[child] != Kind::Other;
      }
      kind[n] = param_side ? Kind::ParamSide : Kind::Other;
    }
    std::unordered_map<Node*, std::unordered_set<Node*>> other_parents;
    for (const NodePtr& node : order)
      if (Node* n = node.get(); kind[n] == Kind::Other)
        for (size_t i = 0; i < n->num_outputs(); ++i) {
          Node* child = n->next_edge(i).function.get();
          if (child && kind[child] == Kind::ParamSide) other_parents[child].insert(n);
        }
    changed = false;
    for (const auto& [child, parents] : other_parents)
      if (parents.size() > 1 && merge_points.insert(child).second) changed = true;
  }
  if (kind[root_edge.function.get()] != Kind::Other)
    throw std::logic_error("SplitBackward: the output depends on parameters only");

  // Weight nodes: Other nodes with a parameter-side edge; their parameters behind those edges.
  std::unordered_map<Node*, Node*> owner;  // accumulator -> the weight node that reaches it
  for (const NodePtr& node : order) {
    Node* n = node.get();
    if (kind[n] != Kind::Other) continue;
    WeightNode w;
    std::vector<NodePtr> stack;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      const NodePtr& child = n->next_edge(i).function;
      if (child && kind[child.get()] != Kind::Other) stack.push_back(child);
    }
    if (stack.empty()) continue;
    std::unordered_set<Node*> seen;
    while (!stack.empty()) {
      const NodePtr c_ptr = std::move(stack.back());
      stack.pop_back();
      Node* c = c_ptr.get();
      if (!seen.insert(c).second) continue;
      if (kind[c] == Kind::Param) {
        auto [it, fresh] = owner.emplace(c, n);
        if (!fresh && it->second != n)
          throw user_error("--pp-schedule zb-h1: ", param_of[c], " of a pipeline chunk is used ",
                           "by two operations in one micro-batch (", it->second->name(), " and ",
                           n->name(), ": a tied or shared weight); its backward cannot be split. "
                           "Use --pp-schedule 1f1b");
        w.accumulators.push_back(c_ptr);
        continue;
      }
      for (size_t i = 0; i < c->num_outputs(); ++i)
        if (const NodePtr& g = c->next_edge(i).function) stack.push_back(g);
    }
    w.node = node;
    weight_nodes_.push_back(std::move(w));
  }

  // B: the input's gradient, and the gradient arriving at every input of every weight node.
  torch::autograd::edge_list outputs;
  const bool has_input = input.defined() && input.requires_grad();
  if (has_input) outputs.push_back(torch::autograd::impl::gradient_edge(input));
  for (const auto& w : weight_nodes_)
    for (uint32_t i = 0; i < w.node->num_inputs(); ++i) outputs.emplace_back(w.node, i);
  auto& engine = torch::autograd::Engine::get_default_engine();
  torch::autograd::variable_list got =
      engine.execute({root_edge}, {seed}, /*keep_graph=*/true, /*create_graph=*/false,
                     /*accumulate_grad=*/false, outputs);
  size_t k = has_input ? 1 : 0;
  for (auto& w : weight_nodes_)
    for (uint32_t i = 0; i < w.node->num_inputs(); ++i, ++k)
      if (got[k].defined()) {
        w.input_nrs.push_back(i);
        w.grads.push_back(got[k]);
      }
  root_ = root;
  return has_input ? got[0] : torch::Tensor();
}

void SplitBackward::backward_weight() {
  if (!pending()) throw std::logic_error("SplitBackward: W without a B");
  auto& engine = torch::autograd::Engine::get_default_engine();
  for (auto& w : weight_nodes_) {
    if (w.grads.empty()) continue;  // no gradient reached it: its parameters get none
    torch::autograd::edge_list roots, params;
    for (uint32_t i : w.input_nrs) roots.emplace_back(w.node, i);
    for (auto& acc : w.accumulators) params.emplace_back(acc, 0);
    engine.execute(roots, w.grads, /*keep_graph=*/false, /*create_graph=*/false,
                   /*accumulate_grad=*/true, params);
  }
  weight_nodes_.clear();
  root_ = torch::Tensor();
}

}  // namespace hlp::parallel
