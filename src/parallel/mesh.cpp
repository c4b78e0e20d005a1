#include "parallel/mesh.h"

#include <sstream>
#include <stdexcept>

namespace hlp::parallel {

const char* mesh_axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::DP: return "dp";
    case MeshAxis::PP: return "pp";
    case MeshAxis::TP: return "tp";
  }
  return "unknown";
}

std::vector<int> axis_ranks(const MeshShape& shape, const MeshCoord& coord, MeshAxis axis) {
  std::vector<int> ranks;
  MeshCoord c = coord;
  int* index = axis == MeshAxis::DP ? &c.dp : (axis == MeshAxis::PP ? &c.pp : &c.tp);
  const int extent = axis == MeshAxis::DP ? shape.dp : (axis == MeshAxis::PP ? shape.pp : shape.tp);
  for (*index = 0; *index < extent; ++*index) ranks.push_back(mesh_rank(shape, c));
  return ranks;
}

Mesh::Mesh(std::shared_ptr<comm::Communicator> world, int tp, int pp)
    : world_(std::move(world)),
      shape_(make_mesh_shape(world_->size(), tp, pp)),
      coord_(mesh_coord(shape_, world_->rank())) {
  // One split per axis, in the same order on every rank. color = the index of the group
  // (the other two coordinates), key = the coordinate along the axis.
  dp_ = world_->split(coord_.pp * shape_.tp + coord_.tp, coord_.dp);
  pp_ = world_->split(coord_.dp * shape_.tp + coord_.tp, coord_.pp);
  tp_ = world_->split(coord_.dp * shape_.pp + coord_.pp, coord_.tp);
  if (dp_->size() != shape_.dp || dp_->rank() != coord_.dp || pp_->size() != shape_.pp ||
      pp_->rank() != coord_.pp || tp_->size() != shape_.tp || tp_->rank() != coord_.tp)
    throw std::logic_error("Mesh: axis communicators disagree with the layout (" +
                           shape_string() + ", " + coord_string() + ")");
}

const std::shared_ptr<comm::Communicator>& Mesh::axis_comm(MeshAxis axis) const {
  return axis == MeshAxis::DP ? dp_ : (axis == MeshAxis::PP ? pp_ : tp_);
}

std::string Mesh::shape_string() const {
  std::ostringstream os;
  os << "dp " << shape_.dp << " x pp " << shape_.pp << " x tp " << shape_.tp;
  return os.str();
}

std::string Mesh::coord_string() const {
  std::ostringstream os;
  os << "rank " << world_->rank() << " = (dp " << coord_.dp << ", pp " << coord_.pp << ", tp "
     << coord_.tp << ")";
  return os.str();
}

}  // namespace hlp::parallel
