#pragma once
// Pure arithmetic of the dp x pp x cp x tp device mesh (no MPI, no LibTorch), so data, metrics
// and tests can compute coordinates without a communicator.
//
// Placement (Megatron's order): tp is innermost, then cp (context parallel), then pp, then dp:
//   world_rank = ((dp_index * pp + pp_index) * cp + cp_index) * tp + tp_index
// so tensor-parallel partners are neighbouring ranks (same node, fastest links), context-parallel
// partners next, and a data-parallel group strides by pp * cp * tp. cp = 1 gives the dp x pp x tp
// placement of before.
//
// Expert parallelism (ep) multiplies nothing: an expert group is carved out of the ranks that
// share a (pp, tp) position, the dp x cp ranks ranked dp-major (q = dp_index * cp + cp_index):
// ep consecutive q form one group (its rank q % ep holds the experts [q % ep * E / ep, ...)),
// and the ranks with the same q % ep (dp cp / ep of them) are the replicas of those experts.
// So ep divides dp x cp, and ep = cp puts an expert group on a cp group's ranks.
#include <string>
#include <vector>

#include "common/error.h"

namespace hlp::parallel {

// The axes of the mesh. The model-parallel ones (pp, tp, cp) are entries of the strategy
// registry (registry.h); dp is what remains of the world size.
enum class MeshAxis { DP, PP, TP, CP, EP };
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::DP, MeshAxis::PP, MeshAxis::TP, MeshAxis::CP,
                                         MeshAxis::EP};
inline const char* mesh_axis_name(MeshAxis axis) {  // "dp", "pp", "tp", "cp", "ep"
  switch (axis) {
    case MeshAxis::DP: return "dp";
    case MeshAxis::PP: return "pp";
    case MeshAxis::TP: return "tp";
    case MeshAxis::CP: return "cp";
    case MeshAxis::EP: return "ep";
  }
  return "unknown";
}

struct MeshShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int cp = 1;
  int ep = 1;  // divides dp x cp (not a factor of the world size)
  int world() const { return dp * pp * cp * tp; }
  int size(MeshAxis axis) const { return const_cast<MeshShape*>(this)->size(axis); }
  int& size(MeshAxis axis) {
    return axis == MeshAxis::DP   ? dp
           : axis == MeshAxis::PP ? pp
           : axis == MeshAxis::CP ? cp
           : axis == MeshAxis::EP ? ep
                                  : tp;
  }
};

struct MeshCoord {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  int cp = 0;
  int ep = 0;  // (dp * cp_size + cp) % ep_size: which slice of the experts this rank holds
  int index(MeshAxis axis) const { return const_cast<MeshCoord*>(this)->index(axis); }
  int& index(MeshAxis axis) {
    return axis == MeshAxis::DP   ? dp
           : axis == MeshAxis::PP ? pp
           : axis == MeshAxis::CP ? cp
           : axis == MeshAxis::EP ? ep
                                  : tp;
  }
};

// Resolves dp from the world size and the requested tp and pp; throws UserError naming the
// numbers when the world size is not a multiple of tp * pp.
inline MeshShape make_mesh_shape(int world_size, int tp, int pp, int cp = 1, int ep = 1) {
  if (tp < 1) throw user_error("--tp must be >= 1 (got ", tp, ")");
  if (pp < 1) throw user_error("--pp must be >= 1 (got ", pp, ")");
  if (cp < 1) throw user_error("--cp must be >= 1 (got ", cp, ")");
  if (ep < 1) throw user_error("--ep must be >= 1 (got ", ep, ")");
  const int model = tp * pp * cp;
  if (world_size % model != 0) {
    if (cp == 1)
      throw user_error("world size ", world_size, " is not divisible by tp (", tp, ") x pp (", pp,
                       ") = ", model, "; launch a multiple of ", model, " ranks");
    throw user_error("world size ", world_size, " is not divisible by tp (", tp, ") x pp (", pp,
                     ") x cp (", cp, ") = ", model, "; launch a multiple of ", model, " ranks");
  }
  const int dp = world_size / model;
  if ((dp * cp) % ep != 0)
    throw user_error("--ep ", ep, " does not divide the data-parallel ranks (",
                     cp > 1 ? "dp " + std::to_string(dp) + " x cp " + std::to_string(cp) + " = "
                            : std::string("dp = "),
                     dp * cp, "), out of which expert groups are carved; choose an --ep that "
                     "divides ", dp * cp, ", or launch a multiple of ", ep * model, " ranks");
  return MeshShape{dp, pp, tp, cp, ep};
}

inline MeshCoord mesh_coord(const MeshShape& shape, int world_rank) {
  MeshCoord c;
  c.tp = world_rank % shape.tp;
  c.cp = (world_rank / shape.tp) % shape.cp;
  c.pp = (world_rank / (shape.tp * shape.cp)) % shape.pp;
  c.dp = world_rank / (shape.tp * shape.cp * shape.pp);
  c.ep = (c.dp * shape.cp + c.cp) % shape.ep;
  return c;
}

inline int mesh_rank(const MeshShape& shape, const MeshCoord& c) {
  return ((c.dp * shape.pp + c.pp) * shape.cp + c.cp) * shape.tp + c.tp;
}

// World ranks in the group of `coord` along `axis`, in axis order (not EP: see above).
inline std::vector<int> axis_ranks(const MeshShape& shape, const MeshCoord& coord, MeshAxis axis) {
  std::vector<int> ranks;
  MeshCoord c = coord;
  for (c.index(axis) = 0; c.index(axis) < shape.size(axis); ++c.index(axis))
    ranks.push_back(mesh_rank(shape, c));
  return ranks;
}

}  // namespace hlp::parallel
