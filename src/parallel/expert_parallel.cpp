#include "parallel/expert_parallel.h"

#include <stdexcept>

#include "parallel/strategy_util.h"

namespace hlp::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The rows [n, D]: send[r] of them to rank r; returns [sum recv, D], recv[s] from rank s.
torch::Tensor all_to_all_rows(ExpertParallel& ep, const torch::Tensor& rows,
                              const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                              int which, int direction) {
  const int64_t D = rows.size(1);
  int64_t total = 0;
  for (int64_t n : recv) total += n;
  auto in = rows.contiguous();
  auto out = torch::empty({total, D}, rows.options());
  std::vector<int64_t> send_elems, recv_elems;
  for (int64_t n : send) send_elems.push_back(n * D);
  for (int64_t n : recv) recv_elems.push_back(n * D);
  ep.comm().all_to_all(in, out, send_elems, recv_elems);
  const int me = ep.rank();
  EpStats& s = ep.mutable_stats();
  s.bytes_sent[size_t(which)][size_t(direction)] +=
      (in.size(0) - send[size_t(me)]) * D * int64_t(in.element_size());
  ++s.exchanges;
  return out;
}

struct ExchangeFn : torch::autograd::Function<ExchangeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows,
                               std::vector<int64_t> send, std::vector<int64_t> recv, int64_t which,
                               int64_t shard) {
    auto* ep = reinterpret_cast<ExpertParallel*>(shard);
    ctx->saved_data["shard"] = shard;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["which"] = which;
    return all_to_all_rows(*ep, rows, send, recv, int(which), 0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* ep = reinterpret_cast<ExpertParallel*>(ctx->saved_data["shard"].toInt());
    const auto send = ctx->saved_data["send"].toIntVector();
    const auto recv = ctx->saved_data["recv"].toIntVector();
    const int which = int(ctx->saved_data["which"].toInt());
    // the gradient of what arrived goes back to where it came from
    auto dx = all_to_all_rows(*ep, grads[0], recv, send, which, 1);
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ExpertParallel::ExpertParallel(std::shared_ptr<comm::Communicator> ep_comm)
    : comm_(std::move(ep_comm)) {
  if (!comm_) throw std::logic_error("ExpertParallel: no expert-group communicator");
}

torch::Tensor ExpertParallel::exchange_counts(const torch::Tensor& counts) {
  const int P = ranks();
  const int64_t E = counts.numel(), local = E / P;
  if (local * P != E)
    throw std::logic_error("ExpertParallel: the experts do not split evenly over the group");
  // int64 counts on the communicator's device (NCCL takes CUDA tensors only), back to the CPU
  const auto options = scalar_options_for(*comm_, torch::kLong);
  auto in = counts.to(options.device(), torch::kLong).contiguous();
  auto out = torch::empty({P * local}, options);
  comm_->all_to_all(in, out, std::vector<int64_t>(size_t(P), local),
                    std::vector<int64_t>(size_t(P), local));
  stats_.count_bytes += (E - local) * int64_t(sizeof(int64_t));
  auto recv = out.view({P, local}).cpu();
  // rows sent to / received from the other ranks, for the statistics
  const auto c = counts.cpu();
  const int me = rank();
  stats_.rows_sent += c.sum().item<int64_t>() - c.narrow(0, me * local, local).sum().item<int64_t>();
  stats_.rows_received += recv.sum().item<int64_t>() - recv[me].sum().item<int64_t>();
  return recv;
}

torch::Tensor ExpertParallel::exchange(const torch::Tensor& rows,
                                       const std::vector<int64_t>& send_rows,
                                       const std::vector<int64_t>& recv_rows, bool combine) {
  return ExchangeFn::apply(rows, send_rows, recv_rows, int64_t(combine ? 1 : 0),
                           int64_t(reinterpret_cast<intptr_t>(this)));
}

}  // namespace hlp::parallel
