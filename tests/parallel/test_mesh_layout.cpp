// Mesh arithmetic without MPI: shapes, coordinates, axis groups, impossible shapes.
#include "catch_aten.h"  // ATen (via mesh.h) before Catch, see catch_aten.h

#include <set>

#include "parallel/mesh.h"

using namespace hlp::parallel;

TEST_CASE("mesh shape resolves dp from world, tp and pp", "[parallel][mesh]") {
  MeshShape s = make_mesh_shape(8, 2, 2);
  CHECK(s.dp == 2);
  CHECK(s.pp == 2);
  CHECK(s.tp == 2);
  CHECK(s.world() == 8);
  CHECK(make_mesh_shape(4, 1, 1).dp == 4);
}

TEST_CASE("impossible mesh shapes name the numbers", "[parallel][mesh]") {
  CHECK_THROWS_AS(make_mesh_shape(4, 3, 1), hlp::UserError);
  CHECK_THROWS_WITH(make_mesh_shape(4, 3, 1), Catch::Contains("world size 4") &&
                                                  Catch::Contains("tp (3)") &&
                                                  Catch::Contains("pp (1)"));
  CHECK_THROWS_WITH(make_mesh_shape(6, 2, 2), Catch::Contains("world size 6") &&
                                                  Catch::Contains("= 4"));
  CHECK_THROWS_WITH(make_mesh_shape(4, 0, 1), Catch::Contains("--tp must be >= 1 (got 0)"));
  CHECK_THROWS_WITH(make_mesh_shape(4, 1, -2), Catch::Contains("--pp must be >= 1 (got -2)"));
}

TEST_CASE("tp is innermost: coordinates round-trip and tp partners are neighbours",
          "[parallel][mesh]") {
  MeshShape s = make_mesh_shape(12, 2, 3);  // dp 2 x pp 3 x tp 2
  for (int r = 0; r < 12; ++r) {
    MeshCoord c = mesh_coord(s, r);
    CHECK(mesh_rank(s, c) == r);
    CHECK(c.tp == r % 2);
  }
  MeshCoord c5 = mesh_coord(s, 5);  // 5 = (0*3 + 2)*2 + 1
  CHECK(c5.dp == 0);
  CHECK(c5.pp == 2);
  CHECK(c5.tp == 1);
}

TEST_CASE("axis groups partition the world and stride as documented", "[parallel][mesh]") {
  MeshShape s = make_mesh_shape(4, 2, 1);  // the 2x2 mesh: dp 2 x tp 2
  CHECK(axis_ranks(s, mesh_coord(s, 0), MeshAxis::TP) == std::vector<int>{0, 1});
  CHECK(axis_ranks(s, mesh_coord(s, 3), MeshAxis::TP) == std::vector<int>{2, 3});
  CHECK(axis_ranks(s, mesh_coord(s, 0), MeshAxis::DP) == std::vector<int>{0, 2});
  CHECK(axis_ranks(s, mesh_coord(s, 3), MeshAxis::DP) == std::vector<int>{1, 3});
  CHECK(axis_ranks(s, mesh_coord(s, 2), MeshAxis::PP) == std::vector<int>{2});

  MeshShape big = make_mesh_shape(24, 2, 3);
  for (MeshAxis axis : {MeshAxis::DP, MeshAxis::PP, MeshAxis::TP}) {
    std::set<std::vector<int>> groups;
    for (int r = 0; r < 24; ++r) {
      auto ranks = axis_ranks(big, mesh_coord(big, r), axis);
      CHECK(std::count(ranks.begin(), ranks.end(), r) == 1);
      groups.insert(ranks);
    }
    size_t members = 0;
    for (const auto& g : groups) members += g.size();
    INFO(mesh_axis_name(axis));
    CHECK(members == 24);  // every rank in exactly one group of this axis
  }
}

TEST_CASE("the cp axis sits between tp and pp", "[parallel][mesh][cp]") {
  MeshShape s = make_mesh_shape(16, 2, 2, 2);  // dp 2 x pp 2 x cp 2 x tp 2
  CHECK(s.dp == 2);
  CHECK(s.cp == 2);
  CHECK(s.world() == 16);
  for (int r = 0; r < 16; ++r) CHECK(mesh_rank(s, mesh_coord(s, r)) == r);
  MeshCoord c = mesh_coord(s, 6);  // 6 = ((dp 0 * 2 + pp 1) * 2 + cp 1) * 2 + tp 0
  CHECK(c.tp == 0);
  CHECK(c.cp == 1);
  CHECK(c.pp == 1);
  CHECK(c.dp == 0);
  CHECK(axis_ranks(s, mesh_coord(s, 0), MeshAxis::CP) == std::vector<int>{0, 2});
  CHECK(axis_ranks(s, mesh_coord(s, 0), MeshAxis::PP) == std::vector<int>{0, 4});
  CHECK(axis_ranks(s, mesh_coord(s, 0), MeshAxis::DP) == std::vector<int>{0, 8});
  // cp 1: the placement of before
  MeshShape old = make_mesh_shape(12, 2, 3);
  for (int r = 0; r < 12; ++r) {
    const MeshCoord k = mesh_coord(old, r);
    CHECK(k.cp == 0);
    CHECK(r == (k.dp * old.pp + k.pp) * old.tp + k.tp);
  }
  CHECK_THROWS_WITH(make_mesh_shape(6, 1, 1, 4), Catch::Contains("cp (4)") &&
                                                     Catch::Contains("world size 6"));
  CHECK_THROWS_WITH(make_mesh_shape(4, 1, 1, 0), Catch::Contains("--cp must be >= 1 (got 0)"));
}
