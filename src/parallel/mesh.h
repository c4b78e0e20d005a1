#pragma once
// The dp x pp x cp x tp device mesh over a world communicator, with one sub-communicator per
// axis. Placement is mesh_layout.h's (Megatron order, tp innermost, then cp):
//   world_rank = ((dp_index * pp + pp_index) * cp + cp_index) * tp + tp_index
// e.g. 4 ranks, --tp 2: dp 2 x pp 1 x tp 2; tp groups {0,1} {2,3}; dp groups {0,2} {1,3}.
//
// Each axis communicator ranks its members by their index along that axis, so
// dp_comm().rank() == coord().dp, pp_comm().rank() == coord().pp, tp_comm().rank() == coord().tp.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/mesh_layout.h"

namespace hlp::parallel {

class Mesh {
 public:
  // Collective over world (every rank must construct its Mesh at the same point).
  // Throws hlp::UserError naming the numbers when world->size() is not a multiple of tp * pp
  // or tp / pp < 1 (on every rank alike, before any communication).
  Mesh(std::shared_ptr<comm::Communicator> world, int tp, int pp, int cp = 1, int ep = 1);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  int world_rank() const { return world_->rank(); }

  const std::shared_ptr<comm::Communicator>& world_comm() const { return world_; }
  const std::shared_ptr<comm::Communicator>& dp_comm() const { return dp_; }  // same pp, tp
  const std::shared_ptr<comm::Communicator>& pp_comm() const { return pp_; }  // same dp, tp
  const std::shared_ptr<comm::Communicator>& tp_comm() const { return tp_; }  // same dp, pp
  // same dp, pp, tp; nullptr when cp = 1
  const std::shared_ptr<comm::Communicator>& cp_comm() const { return cp_; }
  // The data-parallel and context-parallel ranks of one (pp, tp) position together, ranked
  // dp-major (dp_index * cp + cp_index): gradients are averaged over it when cp > 1 (every
  // rank of it holds an equal share of the global batch's tokens). dp_comm() itself when cp = 1.
  const std::shared_ptr<comm::Communicator>& dp_cp_comm() const { return dp_cp_; }
  // Expert parallelism (mesh_layout.h): the ep ranks of dp_cp_comm() that split the experts
  // (rank = coord().ep), and the dp cp / ep ranks that hold the same experts (their replicas,
  // over which an expert's gradients are reduced). Both nullptr when ep = 1.
  const std::shared_ptr<comm::Communicator>& ep_comm() const { return ep_; }
  const std::shared_ptr<comm::Communicator>& ep_replica_comm() const { return ep_replica_; }
  const std::shared_ptr<comm::Communicator>& axis_comm(MeshAxis axis) const;

  // "dp 2 x pp 1 x tp 2" and "rank 3 = (dp 1, pp 0, tp 1)", for logs and result files.
  // (" x cp N" is appended only when cp > 1, so cp-free names stay what checkpoints recorded.)
  std::string shape_string() const;
  std::string coord_string() const;

 private:
  std::shared_ptr<comm::Communicator> world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::shared_ptr<comm::Communicator> dp_, pp_, tp_, cp_, dp_cp_, ep_, ep_replica_;
};

}  // namespace hlp::parallel
