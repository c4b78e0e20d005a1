// 4 MPI ranks as a 2 (dp) x 2 (tp) mesh: tensor-parallel partners must get identical batches,
// data-parallel ranks different ones, and the dp ranks' rows of a step must be exactly the
// 1-rank global batch of that step. Every rank checks everything (allgather) and the exit code
// says whether all ranks agree.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/loader.h"
#include "parallel/mesh_layout.h"

using namespace hlp;

namespace {

int failures = 0;
void check(bool ok, int rank, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The loader's worker threads never call MPI; only the main thread does (FUNNELED).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* src = std::getenv("HLP_SOURCE_DIR");
  const std::string corpus = std::string(src ? src : HLP_TEST_SOURCE_DIR) + "/datasets/sample/corpus.txt";
  try {
    const auto shape = parallel::make_mesh_shape(world, /*tp=*/2, /*pp=*/1);
    const auto coord = parallel::mesh_coord(shape, rank);

    data::DataOptions o;
    o.path = corpus;
    o.seq_len = 32;
    o.global_batch = 8;
    o.seed = 11;
    o.loader_threads = 1 + rank % 2;  // partners even use different thread counts
    o.chunk_bytes = 4096;
    const int steps = 6;
    const int rows = o.global_batch / shape.dp, cols = o.seq_len + 1;
    const size_t per_step = static_cast<size_t>(rows) * cols;

    // This rank's batches; the loader only sees (dp index, dp size), never tp or pp.
    data::Loader loader(o, coord.dp, shape.dp);
    std::vector<int64_t> mine, mine_rows;
    for (int s = 0; s < steps; ++s) {
      const data::Batch b = loader.next();
      check(b.step == s && b.rows == rows && b.cols == cols, rank, "batch shape / step");
      mine.insert(mine.end(), b.tokens.begin(), b.tokens.end());
      mine_rows.insert(mine_rows.end(), b.global_rows.begin(), b.global_rows.end());
    }
    std::vector<int64_t> all(mine.size() * world), all_rows(mine_rows.size() * world);
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                  static_cast<int>(mine.size()), MPI_INT64_T, MPI_COMM_WORLD);
    MPI_Allgather(mine_rows.data(), static_cast<int>(mine_rows.size()), MPI_INT64_T,
                  all_rows.data(), static_cast<int>(mine_rows.size()), MPI_INT64_T, MPI_COMM_WORLD);
    const auto batches_of = [&](int r) {
      return std::vector<int64_t>(all.begin() + r * mine.size(), all.begin() + (r + 1) * mine.size());
    };

    // 1. TP partners (same dp index) are identical; 2. different dp indices differ.
    for (int r = 0; r < world; ++r)
      for (int q = r + 1; q < world; ++q) {
        const auto cr = parallel::mesh_coord(shape, r), cq = parallel::mesh_coord(shape, q);
        if (cr.dp == cq.dp)
          check(batches_of(r) == batches_of(q), rank,
                "tp partners " + std::to_string(r) + " and " + std::to_string(q) + " differ");
        else
          check(batches_of(r) != batches_of(q), rank,
                "dp ranks " + std::to_string(r) + " and " + std::to_string(q) + " got the same data");
      }

    // 3. The union of the dp ranks' rows of step s = the 1-rank global batch of step s.
    data::Loader single(o, 0, 1);
    for (int s = 0; s < steps; ++s) {
      const data::Batch g = single.next();
      std::vector<int64_t> glued, glued_rows;
      for (int d = 0; d < shape.dp; ++d) {
        const int r = parallel::mesh_rank(shape, parallel::MeshCoord{d, 0, 0});
        const auto b = batches_of(r);
        glued.insert(glued.end(), b.begin() + s * per_step, b.begin() + (s + 1) * per_step);
        glued_rows.insert(glued_rows.end(), all_rows.begin() + r * mine_rows.size() + s * rows,
                          all_rows.begin() + r * mine_rows.size() + (s + 1) * rows);
      }
      check(glued == g.tokens, rank, "dp union != global batch at step " + std::to_string(s));
      check(glued_rows == g.global_rows, rank, "global row indices at step " + std::to_string(s));
    }

    // 4. A global batch that dp does not divide fails alike on every rank (no hang).
    o.global_batch = 3;
    bool threw = false;
    try {
      data::Loader bad(o, coord.dp, shape.dp);
    } catch (const UserError& e) {
      threw = std::string(e.what()).find("not divisible") != std::string::npos;
    }
    check(threw, rank, "global_batch 3 on dp 2 did not raise UserError");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("data mpi mesh test (%d ranks, dp x tp = %d x 2): %s (%d failed checks)\n", world,
                world / 2, total == 0 ? "PASSED" : "FAILED", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
