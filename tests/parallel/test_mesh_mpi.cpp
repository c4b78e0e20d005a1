// The Mesh on real ranks: axis communicators have the documented members and work.
#include "catch_aten.h"

#include "mpi_test_world.h"
#include "parallel/mesh.h"

using namespace hlp::parallel;

namespace {

// World ranks of the members of comm, gathered on comm.
std::vector<int> members(hlp::comm::Communicator& comm) {
  at::Tensor all = comm.all_gather(at::full({1}, test_world().rank(), at::kLong)).view({-1});
  std::vector<int> ranks;
  for (int64_t i = 0; i < all.numel(); ++i) ranks.push_back(static_cast<int>(all[i].item<int64_t>()));
  return ranks;
}

void check_mesh(int tp, int pp) {
  auto& world = test_world();
  Mesh mesh(test_world_ptr(), tp, pp);
  INFO(mesh.shape_string() << "; " << mesh.coord_string());
  CHECK(mesh.shape().world() == world.size());
  CHECK(mesh.shape().tp == tp);
  CHECK(mesh.shape().pp == pp);
  for (MeshAxis axis : {MeshAxis::DP, MeshAxis::PP, MeshAxis::TP}) {
    INFO("axis " << mesh_axis_name(axis));
    auto& comm = *mesh.axis_comm(axis);
    CHECK(members(comm) == axis_ranks(mesh.shape(), mesh.coord(), axis));
    // a collective on the axis sums exactly its members' world ranks
    at::Tensor x = at::full({5}, double(world.rank()), at::kDouble);
    comm.all_reduce(x);
    double want = 0;
    for (int r : axis_ranks(mesh.shape(), mesh.coord(), axis)) want += r;
    CHECK(at::equal(x, at::full({5}, want, at::kDouble)));
  }
  CHECK(mesh.dp_comm()->rank() == mesh.coord().dp);
  CHECK(mesh.pp_comm()->rank() == mesh.coord().pp);
  CHECK(mesh.tp_comm()->rank() == mesh.coord().tp);
}

}  // namespace

TEST_CASE("every mesh shape that fits the world has the documented axis groups",
          "[mpi][mesh]") {
  const int n = test_world().size();
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; pp <= n; ++pp)
      if (n % (tp * pp) == 0) check_mesh(tp, pp);
}

TEST_CASE("2x2 mesh: dp groups {0,2} {1,3}, tp groups {0,1} {2,3}", "[mpi][mesh]") {
  auto& world = test_world();
  if (world.size() != 4) return;
  Mesh mesh(test_world_ptr(), /*tp=*/2, /*pp=*/1);
  const int r = world.rank();
  CHECK(members(*mesh.tp_comm()) == (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
  CHECK(members(*mesh.dp_comm()) == (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
  CHECK(mesh.pp_comm()->size() == 1);
  // async ops on dp and tp at once (as tensor parallel inside data parallel would issue)
  at::Tensor a = at::full({1000}, double(r), at::kFloat);
  at::Tensor b = at::full({1000}, double(r), at::kFloat);
  auto wa = mesh.dp_comm()->all_reduce_async(a, hlp::comm::ReduceOp::Sum);
  auto wb = mesh.tp_comm()->all_reduce_async(b, hlp::comm::ReduceOp::Max);
  wa->wait();
  wb->wait();
  CHECK(at::equal(a, at::full({1000}, double(r % 2 == 0 ? 0 + 2 : 1 + 3), at::kFloat)));
  CHECK(at::equal(b, at::full({1000}, double(r < 2 ? 1 : 3), at::kFloat)));
}

TEST_CASE("an impossible mesh throws UserError on every rank without communicating",
          "[mpi][mesh]") {
  const int n = test_world().size();
  CHECK_THROWS_AS(Mesh(test_world_ptr(), n + 1, 1), hlp::UserError);
  CHECK_THROWS_WITH(Mesh(test_world_ptr(), 1, n + 1),
                    Catch::Contains("world size " + std::to_string(n)));
  // the world is still in step afterwards
  test_world().barrier();
}

TEST_CASE("cp mesh at 4 ranks: cp groups {0,1} {2,3}, dp x cp the whole world", "[mpi][mesh]") {
  auto& world = test_world();
  if (world.size() != 4) return;
  Mesh mesh(test_world_ptr(), /*tp=*/1, /*pp=*/1, /*cp=*/2);
  const int r = world.rank();
  CHECK(mesh.shape_string() == "dp 2 x pp 1 x tp 1 x cp 2");
  CHECK(mesh.coord().cp == r % 2);
  CHECK(members(*mesh.cp_comm()) == (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
  CHECK(members(*mesh.dp_comm()) == (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
  CHECK(members(*mesh.dp_cp_comm()) == std::vector<int>{0, 1, 2, 3});
  CHECK(members(*mesh.axis_comm(MeshAxis::CP)) == axis_ranks(mesh.shape(), mesh.coord(), MeshAxis::CP));
  Mesh plain(test_world_ptr(), 1, 1);
  CHECK(plain.cp_comm() == nullptr);
  CHECK(plain.dp_cp_comm() == plain.dp_comm());
}
