#pragma once
// Pure arithmetic of the dp x pp x cp x tp device mesh (no MPI, no LibTorch), so data, metrics
// and tests can compute coordinates without a communicator.
//
// Placement (Megatron's order): tp is innermost, then cp (context parallel), then pp, then dp:
//   world_rank = ((dp_index * pp + pp_index) * cp + cp_index) * tp + tp_index
// so tensor-parallel partners are neighbouring ranks (same node, fastest links), context-parallel
// partners next, and a data-parallel group strides by pp * cp * tp. cp = 1 gives the dp x pp x tp
// placement of before.
#include <vector>

#include "common/error.h"

namespace hlp::parallel {

// The axes of the mesh. The model-parallel ones (pp, tp, cp) are entries of the strategy
// registry (registry.h); dp is what remains of the world size.
enum class MeshAxis { DP, PP, TP, CP };
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::DP, MeshAxis::PP, MeshAxis::TP, MeshAxis::CP};
inline const char* mesh_axis_name(MeshAxis axis) {  // "dp", "pp", "tp", "cp"
  switch (axis) {
    case MeshAxis::DP: return "dp";
    case MeshAxis::PP: return "pp";
    case MeshAxis::TP: return "tp";
    case MeshAxis::CP: return "cp";
  }
  return "unknown";
}

struct MeshShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int cp = 1;
  int world() const { return dp * pp * cp * tp; }
  int size(MeshAxis axis) const { return const_cast<MeshShape*>(this)->size(axis); }
  int& size(MeshAxis axis) {
    return axis == MeshAxis::DP ? dp : axis == MeshAxis::PP ? pp : axis == MeshAxis::CP ? cp : tp;
  }
};

struct MeshCoord {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  int cp = 0;
  int index(MeshAxis axis) const { return const_cast<MeshCoord*>(this)->index(axis); }
  int& index(MeshAxis axis) {
    return axis == MeshAxis::DP ? dp : axis == MeshAxis::PP ? pp : axis == MeshAxis::CP ? cp : tp;
  }
};

// Resolves dp from the world size and the requested tp and pp; throws UserError naming the
// numbers when the world size is not a multiple of tp * pp.
inline MeshShape make_mesh_shape(int world_size, int tp, int pp, int cp = 1) {
  if (tp < 1) throw user_error("--tp must be >= 1 (got ", tp, ")");
  if (pp < 1) throw user_error("--pp must be >= 1 (got ", pp, ")");
  if (cp < 1) throw user_error("--cp must be >= 1 (got ", cp, ")");
  const int model = tp * pp * cp;
  if (world_size % model != 0) {
    if (cp == 1)
      throw user_error("world size ", world_size, " is not divisible by tp (", tp, ") x pp (", pp,
                       ") = ", model, "; launch a multiple of ", model, " ranks");
    throw user_error("world size ", world_size, " is not divisible by tp (", tp, ") x pp (", pp,
                     ") x cp (", cp, ") = ", model, "; launch a multiple of ", model, " ranks");
  }
  return MeshShape{world_size / model, pp, tp, cp};
}

inline MeshCoord mesh_coord(const MeshShape& shape, int world_rank) {
  MeshCoord c;
  c.tp = world_rank % shape.tp;
  c.cp = (world_rank / shape.tp) % shape.cp;
  c.pp = (world_rank / (shape.tp * shape.cp)) % shape.pp;
  c.dp = world_rank / (shape.tp * shape.cp * shape.pp);
  return c;
}

inline int mesh_rank(const MeshShape& shape, const MeshCoord& c) {
  return ((c.dp * shape.pp + c.pp) * shape.cp + c.cp) * shape.tp + c.tp;
}

// World ranks in the group of `coord` along `axis`, in axis order.
inline std::vector<int> axis_ranks(const MeshShape& shape, const MeshCoord& coord, MeshAxis axis) {
  std::vector<int> ranks;
  MeshCoord c = coord;
  for (c.index(axis) = 0; c.index(axis) < shape.size(axis); ++c.index(axis))
    ranks.push_back(mesh_rank(shape, c));
  return ranks;
}

}  // namespace hlp::parallel
