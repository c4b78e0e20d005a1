#pragma once
// Expert parallelism (--ep N): the routed experts of every mixture-of-experts layer split over
// the N ranks of an expert group (carved out of the dp x cp ranks: mesh_layout.h), this being the
// communicating side of model/moe.h's ExpertShard. Per sparse layer and micro-batch:
//   exchange_counts  one all-to-all of int64 counts: what each rank routes to each expert of
//                    every other rank ([E / N] a rank pair)
//   dispatch         one all-to-all of the routed (token, k) rows, [slots, D], to their
//                    experts' ranks (dropless: every slot travels; no capacity factor)
//   combine          one all-to-all of the expert outputs back to where the rows came from
// and in the backward the two row exchanges once more, the other way. Every exchange goes
// through the Communicator, so its waits count as exposed communication.
//
// The bytes a rank sends (to other ranks; the rows it keeps are a local copy) per layer and
// micro-batch: dispatch out_r D s, combine in_r D s forward, and the same two backward, with
// out_r the rows it routes to other ranks' experts, in_r the rows other ranks route to its
// experts, s the activations' element bytes; summed over the group, 4 sum_r out_r D s
// (docs/strategies.md, "Expert parallelism").
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "model/moe.h"

namespace hlp::parallel {

struct EpStats {
  // bytes this rank sent to the other ranks of its expert group,
  // [0 dispatch, 1 combine][0 forward, 1 backward]
  std::array<std::array<int64_t, 2>, 2> bytes_sent{};
  int64_t count_bytes = 0;     // the count exchanges' bytes (to other ranks)
  int64_t rows_sent = 0;       // dispatched rows this rank sent to other ranks (forward)
  int64_t rows_received = 0;   // dispatched rows other ranks sent this one (forward)
  int64_t exchanges = 0;       // row exchanges run (forward and backward)
  int64_t total_bytes() const {
    return bytes_sent[0][0] + bytes_sent[0][1] + bytes_sent[1][0] + bytes_sent[1][1] + count_bytes;
  }
};

class ExpertParallel : public model::ExpertShard {
 public:
  // ep_comm: the expert group (rank = which slice of the experts this rank holds).
  explicit ExpertParallel(std::shared_ptr<comm::Communicator> ep_comm);

  int ranks() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }
  torch::Tensor exchange_counts(const torch::Tensor& counts) override;
  torch::Tensor exchange(const torch::Tensor& rows, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows, bool combine) override;

  comm::Communicator& comm() const { return *comm_; }
  const EpStats& stats() const { return stats_; }
  EpStats& mutable_stats() { return stats_; }

 private:
  std::shared_ptr<comm::Communicator> comm_;
  EpStats stats_;
};

}  // namespace hlp::parallel
