#include "parallel/mesh.h"

#include <sstream>
#include <stdexcept>

namespace hlp::parallel {

Mesh::Mesh(std::shared_ptr<comm::Communicator> world, int tp, int pp, int cp, int ep)
    : world_(std::move(world)),
      shape_(make_mesh_shape(world_->size(), tp, pp, cp, ep)),
      coord_(mesh_coord(shape_, world_->rank())) {
  // One split per axis, in the same order on every rank. color = the index of the group
  // (the other coordinates), key = the coordinate along the axis.
  const MeshShape& s = shape_;
  const MeshCoord& c = coord_;
  dp_ = world_->split((c.pp * s.cp + c.cp) * s.tp + c.tp, c.dp);
  pp_ = world_->split((c.dp * s.cp + c.cp) * s.tp + c.tp, c.pp);
  tp_ = world_->split((c.dp * s.pp + c.pp) * s.cp + c.cp, c.tp);
  if (s.cp > 1) {
    cp_ = world_->split((c.dp * s.pp + c.pp) * s.tp + c.tp, c.cp);
    dp_cp_ = world_->split(c.pp * s.tp + c.tp, c.dp * s.cp + c.cp);
  } else {
    dp_cp_ = dp_;  // no cp axis: cp_comm() stays nullptr
  }
  if (s.ep > 1) {  // carved out of the dp x cp ranks of one (pp, tp) position, q dp-major
    const int q = c.dp * s.cp + c.cp, position = c.pp * s.tp + c.tp;
    const int groups = s.dp * s.cp / s.ep;
    ep_ = world_->split(position * groups + q / s.ep, q % s.ep);
    ep_replica_ = world_->split(position * s.ep + q % s.ep, q / s.ep);
  }
  if (dp_->size() != shape_.dp || dp_->rank() != coord_.dp || pp_->size() != shape_.pp ||
      pp_->rank() != coord_.pp || tp_->size() != shape_.tp || tp_->rank() != coord_.tp ||
      (cp_ && (cp_->size() != shape_.cp || cp_->rank() != coord_.cp)) ||
      dp_cp_->size() != shape_.dp * shape_.cp ||
      (ep_ && (ep_->size() != shape_.ep || ep_->rank() != coord_.ep ||
               ep_replica_->size() != shape_.dp * shape_.cp / shape_.ep)))
    throw std::logic_error("Mesh: axis communicators disagree with the layout (" +
                           shape_string() + ", " + coord_string() + ")");
}

const std::shared_ptr<comm::Communicator>& Mesh::axis_comm(MeshAxis axis) const {
  return axis == MeshAxis::DP   ? dp_
         : axis == MeshAxis::PP ? pp_
         : axis == MeshAxis::CP ? cp_
         : axis == MeshAxis::EP ? ep_
                                : tp_;
}

std::string Mesh::shape_string() const {
  std::ostringstream os;
  os << "dp " << shape_.dp << " x pp " << shape_.pp << " x tp " << shape_.tp;
  if (shape_.cp > 1) os << " x cp " << shape_.cp;
  if (shape_.ep > 1) os << " (ep " << shape_.ep << ")";
  return os.str();
}

std::string Mesh::coord_string() const {
  std::ostringstream os;
  os << "rank " << world_->rank() << " = (dp " << coord_.dp << ", pp " << coord_.pp << ", tp "
     << coord_.tp;
  if (shape_.cp > 1) os << ", cp " << coord_.cp;
  if (shape_.ep > 1) os << ", ep " << coord_.ep;
  os << ")";
  return os.str();
}

}  // namespace hlp::parallel
