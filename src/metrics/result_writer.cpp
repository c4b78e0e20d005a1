// Parallel HDF5 writer. Layout and names: schema.h and docs/results-schema.md.
// Collective rules followed here: attributes are written by all ranks with rank 0's values
// (broadcast first); dataset creation and H5Dset_extent are called by all ranks with the same
// sizes; /steps writes are collective transfers (each rank selects its row; a rank without data
// selects nothing); /trace/rank<N> writes are independent, by rank N only, because nobody else
// shares that dataset and a collective call per rank would only add synchronisation.
#include "metrics/result_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/error.h"
#include "common/os_error.h"
#include "hlp/version.h"
#include "metrics/h5_util.h"
#include "metrics/run_metadata.h"
#include "metrics/schema.h"
#include "metrics/trace_row.h"

namespace hlp::metrics {
namespace {

// The disk-full reserve (WriterOptions::reserve) has two parts. The last-resort part lets one
// more flush finish: the rows of K steps, a new chunk-index node per metric (v1 B-tree node:
// 2616 bytes), the /summary attributes and 64 KiB for the metadata HDF5 rewrites; doubled for
// the allocator's slack. The going-on part holds the /steps of the rest of the run after the
// trace is dropped, rows and chunk-index nodes (one per 512 chunks of 16 steps) likewise.
int64_t round_up_4k(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

int64_t last_resort_bytes(int64_t flush_steps, int64_t metrics, int64_t world) {
  const int64_t rows = flush_steps * metrics * world * 8;
  return round_up_4k((64 << 10) + 2 * (rows + metrics * 2616 + metrics * (world * 8 + 256)));
}

int64_t going_on_bytes(int64_t steps, int64_t metrics, int64_t world) {
  return round_up_4k(2 * (steps * metrics * world * 8 + metrics * 2616 * (steps / 512)));
}

// Allocates `bytes` of real blocks (not a sparse file) at `path`.
void allocate_reserve(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create the disk-full reserve '" + path + "': " +
                            os_error_text(errno), errno);
  const int err = ::posix_fallocate(fd, 0, bytes);  // glibc writes zeros where the fs cannot
  ::close(fd);
  if (err != 0) {
    ::unlink(path.c_str());
    throw IoError("cannot allocate the " + std::to_string(bytes >> 10) +
                  " KiB disk-full reserve '" + path + "': " + os_error_text(err), err);
  }
}

}  // namespace

// Rank 0's lock on PATH.lock (one writer per result file), released when the State goes: the
// first member, so the last destroyed, after the file is closed.
struct WriterLock {
  int fd = -1;
  ~WriterLock() {
    if (fd >= 0) ::close(fd);
  }
};

struct ResultWriter::State {
  WriterLock lock;
  MPI_Comm comm = MPI_COMM_NULL;  // a dup of the caller's, freed with the State
  int rank = 0;
  int world = 1;
  std::string path;
  WriterOptions options;
  h5::Handle file;
  h5::Handle xfer;        // /steps transfers: collective (or independent, see WriterOptions)
  h5::Handle xfer_indep;  // /trace transfers: independent (each rank owns its dataset)
  std::vector<std::string> metrics;             // dataset names under /steps
  std::map<std::string, h5::Handle> metric_ds;  // name -> /steps/<name>
  h5::Handle step_index_ds;
  std::vector<h5::Handle> trace_ds;   // [world]
  std::vector<int64_t> trace_rows;    // rows written per rank
  h5::Handle trace_type;
  int64_t steps_written = 0;
  std::vector<StepRecord> steps;      // buffered
  std::vector<TraceEvent> events;     // buffered
  std::map<std::string, std::vector<double>> history;  // metric -> this rank's written values
  double trace_shift_s = 0;   // added to this launch's trace times (a resumed launch: > 0)
  int64_t steps_on_disk = 0;  // steps whose rows and metadata a successful H5Fflush wrote
  // Disk-full reserve: rank 0's file; every rank tracks its stage alike. 0: whole, 1: only
  // the last-resort part left (the trace is dropped), 2: gone (the run stops after this flush).
  std::string reserve_path;
  int64_t reserve_last_resort = 0;
  int reserve_stage = 2;
  std::string trace_dropped;  // why the trace stopped ("" while it goes on)
  bool trace_dropped_recorded = false;
  std::string stopping;       // why the run must stop once this flush is on disk
  int space_fd = -1;          // rank 0: the file, for fallocate (ensure_space)
  int64_t space_ready = 0;    // rank 0: bytes from the start whose blocks are allocated
  int64_t eoa_flushed = 0;    // rank 0: end of allocated space at the last flush
  bool finished = false;
  bool broken = false;     // a write failed: nothing more is written or flushed (see io())
  std::string pending;     // the first failure of this rank's attempt()s since the last agreement
  int pending_kind[2] = {0, 0};
  bool leak_comm = false;  // set while unwinding (see ~ResultWriter)

  ~State() {
    release_reserve_file();
    if (space_fd >= 0) ::close(space_fd);
    if (broken) {  // closing would flush what failed: leave the file as the last flush left it
      for (auto& kv : metric_ds) kv.second.release();
      for (auto& h : trace_ds) h.release();
      step_index_ds.release();
      file.release();
    }
    // Members are destroyed after this body runs, so close the HDF5 objects here, file last,
    // before the communicator HDF5 was given goes away.
    metric_ds.clear();
    trace_ds.clear();
    step_index_ds.reset();
    trace_type.reset();
    xfer.reset();
    xfer_indep.reset();
    file.reset();
    if (comm != MPI_COMM_NULL && !leak_comm) MPI_Comm_free(&comm);
  }

  // Runs one collective HDF5 call of the writer (fn) and agrees on its outcome with every rank
  // before anyone goes on. A write can fail on some ranks only (with MPI-IO's two-phase
  // collective writes only the aggregator ranks touch the file and see ENOSPC; a trace write is
  // independent), and a rank that went on into the next collective call alone would hang. So
  // on a failure anywhere every rank throws the first failing rank's message, as IoError when
  // it carries an OS reason (disk full, quota, I/O error), and the writer is `broken`: it writes
  // and flushes nothing more, and the file stays as the last successful H5Fflush left it
  // (readable, complete = 0, every step flushed before).
  //
  // Out of space (ENOSPC, EDQUOT) while a part of the reserve is left: that part is freed and
  // the call is retried on every rank (each call here is idempotent: same extent, same rows,
  // same offsets). Freeing the going-on part drops the trace, so the space goes to the steps;
  // freeing the last-resort part lets this flush complete, then flush_file() ends the run. A
  // flush that fails half-way could leave metadata half-written; the retry completes it.
  template <typename Fn>
  void io(Fn&& fn) {
    if (broken) throw UserError("result file '" + path + "': an earlier write failed");
    attempt(fn);
    int kind[2] = {0, 0};
    std::string problem = exchange_failure(kind);
    if (problem.empty()) return;
    if (kind[0] && (kind[1] == ENOSPC || kind[1] == EDQUOT) && reserve_stage < 2) {
      if (reserve_stage == 0) {
        if (rank == 0) ::truncate(reserve_path.c_str(), reserve_last_resort);
        if (trace_dropped.empty()) trace_dropped = problem;
        reserve_stage = 1;
      } else {
        release_reserve_file();  // stage 2
        stopping = problem;
      }
      MPI_Barrier(comm);  // the space is free before anyone retries
      io(std::forward<Fn>(fn));
      return;
    }
    fail(problem, kind);
  }

  // A batch of collective calls agreed on once (fewer synchronisations than io() per call):
  // every rank makes every call of the batch whatever failed before, so no rank waits alone in
  // a collective call, then agree() ends the batch. No retry: out of space shows in
  // ensure_space(), before a batch.
  template <typename Fn>
  void attempt(Fn&& fn) {
    try {
      fn();
    } catch (const IoError& e) {
      if (pending.empty()) {
        pending = e.what();
        pending_kind[0] = 1;
        pending_kind[1] = e.os_errno();
      }
    } catch (const UserError& e) {
      if (pending.empty()) {
        pending = e.what();
        pending_kind[0] = pending_kind[1] = 0;
      }
    }
  }

  void agree() {
    if (broken) throw UserError("result file '" + path + "': an earlier write failed");
    int kind[2] = {0, 0};
    const std::string problem = exchange_failure(kind);
    if (!problem.empty()) fail(problem, kind);
  }

  // Every rank learns whether an attempt() of any rank failed since the last exchange: "" if
  // none did, else the first failing rank's message (with its rank) and kind (IoError?, errno).
  std::string exchange_failure(int kind[2]) {
    std::string problem = std::move(pending);
    pending.clear();
    kind[0] = pending_kind[0];
    kind[1] = pending_kind[1];
    const int mine = problem.empty() ? INT_MAX : rank;
    int first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX) return {};
    MPI_Bcast(kind, 2, MPI_INT, first, comm);
    int64_t n = static_cast<int64_t>(problem.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, first, comm);
    problem.resize(static_cast<size_t>(n));
    if (n > 0) MPI_Bcast(problem.data(), static_cast<int>(n), MPI_CHAR, first, comm);
    if (world > 1) problem = "rank " + std::to_string(first) + ": " + problem;
    return problem;
  }

  [[noreturn]] void fail(const std::string& problem, const int kind[2]) {
    broken = true;
    std::string message = "result file '" + path + "': " + problem + "; the file keeps the " +
                          std::to_string(steps_on_disk) + " step(s) flushed before (complete = 0)";
    if (!trace_dropped.empty()) message += ", its trace stops earlier";
    if (kind[0]) throw IoError(message, kind[1]);
    throw UserError(message);
  }

  void release_reserve_file() {
    if (rank == 0 && reserve_stage < 2) ::unlink(reserve_path.c_str());
    reserve_stage = 2;
  }

  // Makes real disk blocks (rank 0, fallocate) for everything HDF5 can allocate before the next
  // flush: `growth` bytes past the end of allocation that the last flush wrote into the
  // superblock. Called before any row is written and before each flush, so that out of space
  // shows here, where nothing is half-done, instead of in a write or in H5Fflush: a failed
  // H5Fflush leaves metadata half-written, and HDF5 1.10 cannot even retry it ("slist already
  // enabled"). `growth` is a function: it is computed again on a retry, after the trace is dropped.
  template <typename Growth>
  void ensure_space(Growth&& growth) {
    io([&] {
      if (rank != 0 || space_fd < 0) return;
      const int64_t target = eoa_flushed + growth();
      if (target <= space_ready) return;
      const int64_t end = (target + (64 << 10) - 1) / (64 << 10) * (64 << 10);
      // Past the end of file without changing its size (HDF5 compares the size with its end of
      // allocation); where the file system cannot, posix_fallocate (glibc writes a zero byte
      // per block where a block is missing: safe, no rank writes while this runs).
      int err = ::fallocate(space_fd, FALLOC_FL_KEEP_SIZE, space_ready, end - space_ready) == 0
                    ? 0
                    : errno;
      if (err == EOPNOTSUPP || err == ENOSYS)
        err = ::posix_fallocate(space_fd, space_ready, end - space_ready);
      if (err != 0)
        throw IoError("allocate " + std::to_string((end - space_ready) >> 10) + " KiB: " +
                          os_error_text(err), err);
      space_ready = end;
    });
  }

  // The blocks ensure_space() allocated past the end of the closed file go back (rank 0).
  void release_unused_space() {
    if (rank != 0 || space_fd < 0) return;
    struct stat st {};
    if (::fstat(space_fd, &st) == 0 && space_ready > st.st_size)
      ::fallocate(space_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size,
                  space_ready - st.st_size);
    space_ready = 0;
  }

  // Bytes a metadata-only flush may add (attributes, object headers, /summary): generous.
  int64_t metadata_growth() const {
    return (64 << 10) + 2 * static_cast<int64_t>(metrics.size()) * (2616 + 256 + world * 8);
  }

  // The end of allocated space that the last flush wrote into the superblock (rank 0).
  // H5Fget_eoa wants a SWMR driver and the MPI-IO driver's get_eof fails in HDF5 1.10, so it
  // is read from the file: superblock versions 0/1 (HLP's files) and 2/3, 8-byte addresses.
  void read_flushed_eoa() {
    if (rank != 0 || space_fd < 0) return;
    unsigned char sb[64] = {};
    if (::pread(space_fd, sb, sizeof sb, 0) != static_cast<ssize_t>(sizeof sb)) return;
    const int version = sb[8];
    const size_t at = version == 0 ? 40 : version == 1 ? 44 : 28;
    const int offset_size = version <= 1 ? sb[13] : sb[9];
    if (offset_size != 8) return;
    uint64_t eoa = 0;
    for (int i = 7; i >= 0; --i) eoa = (eoa << 8) | sb[at + static_cast<size_t>(i)];
    if (eoa < (uint64_t{1} << 50)) eoa_flushed = std::max(eoa_flushed, static_cast<int64_t>(eoa));
  }

  // H5Fflush as one agreed call; afterwards every step written so far is on disk. Out of
  // space for good (the last-resort reserve is used): the run ends here, with a whole file.
  // space_ensured: the caller's ensure_space() already covered what this flush writes.
  void flush_file(bool space_ensured = false) {
    if (!space_ensured) ensure_space([&] { return metadata_growth(); });
    io([&] { h5::check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush"); });
    read_flushed_eoa();
    steps_on_disk = steps_written;
    if (stopping.empty()) return;
    broken = true;  // nothing more fits: no more writes, and no close (it would flush again)
    throw IoError("result file '" + path + "': " + stopping + ", also after using the " +
                      "disk-full reserve; the file keeps all " + std::to_string(steps_on_disk) +
                      " step(s) written (complete = 0)" +
                      (trace_dropped.empty() ? "" : ", its trace stops earlier"),
                  ENOSPC);
  }

  // COLLECTIVE. Opens the /steps and /trace datasets of a reopened file (check_same_run()
  // found them all) and drops what a resume at `from_step` recomputes: the /steps columns of
  // steps >= from_step and the trace rows of those steps, so that every step appears once. The
  // kept columns of this rank become its history (the /summary medians cover every step);
  // /summary goes (finish() writes it again).
  void reopen_layout(int64_t from_step) {
    const hid_t root = file.get();
    trace_type = make_trace_row_type();
    int64_t keep = 0;
    std::vector<int64_t> numbers_kept;  // the kept step numbers
    std::vector<TraceRow> kept_trace;   // this rank's kept trace rows
    io([&] {
      trace_ds.clear();
      for (const auto& m : metrics) {
        const std::string name = std::string(schema::kStepsGroup) + "/" + m;
        metric_ds.emplace(m, h5::dataset(H5Dopen2(root, name.c_str(), H5P_DEFAULT),
                                         "open " + name));
      }
      step_index_ds = h5::dataset(H5Dopen2(root, schema::kStepIndex, H5P_DEFAULT),
                                  "open /steps/step");
      for (int r = 0; r < world; ++r) {
        const std::string name = std::string(schema::kTraceGroup) + "/rank" + std::to_string(r);
        trace_ds.push_back(h5::dataset(H5Dopen2(root, name.c_str(), H5P_DEFAULT), "open " + name));
      }
      // The step numbers, written in order; the columns before the first resumed one stay.
      // Every rank reads the same: all agree on `keep`.
      h5::Handle space = h5::space(H5Dget_space(step_index_ds), "/steps/step space");
      hsize_t n = 0;
      H5Sget_simple_extent_dims(space, &n, nullptr);
      std::vector<int64_t> numbers(static_cast<size_t>(n));
      if (n > 0)
        h5::check_status(H5Dread(step_index_ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                 numbers.data()),
                         "read /steps/step");
      while (keep < static_cast<int64_t>(n) && numbers[static_cast<size_t>(keep)] < from_step)
        ++keep;
      numbers_kept.assign(numbers.begin(), numbers.begin() + keep);
      // This rank's kept values of every metric: its history.
      for (const auto& m : metrics) {
        std::vector<double> values(static_cast<size_t>(keep));
        if (keep > 0) {
          h5::Handle fspace = h5::space(H5Dget_space(metric_ds.at(m)), "/steps/" + m);
          const hsize_t start[2] = {static_cast<hsize_t>(rank), 0};
          const hsize_t cnt[2] = {1, static_cast<hsize_t>(keep)};
          h5::check_status(
              H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr),
              "select /steps/" + m);
          const hsize_t mem_n = static_cast<hsize_t>(keep);
          h5::Handle mspace = h5::space(H5Screate_simple(1, &mem_n, nullptr), "/steps/" + m);
          h5::check_status(H5Dread(metric_ds.at(m), H5T_NATIVE_DOUBLE, mspace, fspace,
                                   H5P_DEFAULT, values.data()),
                           "read /steps/" + m);
        }
        history[m] = std::move(values);
      }
    });
    // The trace rows of the kept steps (and those outside any step): this rank reads its own.
    int64_t kept_rows = 0;
    io([&] {
      const hid_t ds = trace_ds[static_cast<size_t>(rank)];
      h5::Handle space = h5::space(H5Dget_space(ds), "trace space");
      hsize_t n = 0;
      H5Sget_simple_extent_dims(space, &n, nullptr);
      std::vector<TraceRow> rows(static_cast<size_t>(n));
      if (n > 0)
        h5::check_status(H5Dread(ds, trace_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
                         "read /trace/rank" + std::to_string(rank));
      kept_trace.clear();
      for (const auto& row : rows)
        if (row.step < from_step) kept_trace.push_back(row);
      kept_rows = static_cast<int64_t>(kept_trace.size());
    });
    trace_rows.assign(static_cast<size_t>(world), 0);
    MPI_Allgather(&kept_rows, 1, MPI_INT64_T, trace_rows.data(), 1, MPI_INT64_T, comm);
    // The kept part goes into fresh datasets (same type and creation properties) rather than
    // shrinking the old ones: HDF5 2.2 (Debian sid) aborts in H5D__chunk_write ("UINT_MAX ==
    // udata.idx_hint") when a shrunk chunked dataset is written again in parallel.
    auto recreate = [&](h5::Handle& ds, const std::string& name, hid_t type,
                        std::vector<hsize_t> dims) {
      h5::Handle dcpl = h5::plist(H5Dget_create_plist(ds), "creation list of " + name);
      ds.reset();
      h5::check_status(H5Ldelete(root, name.c_str(), H5P_DEFAULT), "delete " + name);
      std::vector<hsize_t> maxdims(dims);
      maxdims.back() = H5S_UNLIMITED;
      h5::Handle space = h5::space(H5Screate_simple(int(dims.size()), dims.data(), maxdims.data()),
                                   name + " space");
      ds = h5::dataset(H5Dcreate2(root, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                       "create " + name);
    };
    io([&] {
      for (const auto& m : metrics) {
        const std::string name = std::string(schema::kStepsGroup) + "/" + m;
        recreate(metric_ds.at(m), name, H5T_IEEE_F64LE,
                 {static_cast<hsize_t>(world), static_cast<hsize_t>(keep)});
        const hsize_t start[2] = {static_cast<hsize_t>(rank), 0};
        const hsize_t cnt[2] = {1, static_cast<hsize_t>(keep)};
        write_slab(metric_ds.at(m), H5T_NATIVE_DOUBLE, history[m].data(), 2, start, cnt,
                   "rewrite " + name, xfer);
      }
      std::vector<int64_t> kept_numbers;
      for (int64_t i = 0; i < keep; ++i) kept_numbers.push_back(i < int64_t(numbers_kept.size())
                                                                    ? numbers_kept[size_t(i)]
                                                                    : i);
      recreate(step_index_ds, schema::kStepIndex, H5T_STD_I64LE, {static_cast<hsize_t>(keep)});
      const hsize_t start1[1] = {0};
      const hsize_t cnt1[1] = {rank == 0 ? static_cast<hsize_t>(keep) : 0};
      write_slab(step_index_ds, H5T_NATIVE_INT64, kept_numbers.data(), 1, start1, cnt1,
                 "rewrite /steps/step", xfer);
      for (int r = 0; r < world; ++r)
        recreate(trace_ds[static_cast<size_t>(r)],
                 std::string(schema::kTraceGroup) + "/rank" + std::to_string(r), trace_type,
                 {static_cast<hsize_t>(trace_rows[static_cast<size_t>(r)])});
      if (h5::link_exists(root, schema::kSummaryGroup))
        h5::check_status(H5Ldelete(root, schema::kSummaryGroup, H5P_DEFAULT), "delete /summary");
    });
    io([&] {  // independent: each rank its own trace rows
      if (kept_trace.empty()) return;
      const hsize_t start[1] = {0};
      const hsize_t cnt[1] = {static_cast<hsize_t>(kept_trace.size())};
      write_slab(trace_ds[static_cast<size_t>(rank)], trace_type, kept_trace.data(), 1, start,
                 cnt, "rewrite /trace/rank" + std::to_string(rank), xfer_indep);
    });
    steps_written = steps_on_disk = keep;
  }

  // One collective write of `count` rows of `mem_type` data into a 1-D or 2-D slab of ds.
  // Ranks with nothing to write pass count 0 (empty selection on both sides).
  void write_slab(hid_t ds, hid_t mem_type, const void* data, int rank_dims, const hsize_t* start,
                  const hsize_t* count, const std::string& what, hid_t transfer) {
    h5::Handle fspace = h5::space(H5Dget_space(ds), what);
    hsize_t n = 1;
    for (int d = 0; d < rank_dims; ++d) n *= count[d];
    const hsize_t mem_n = std::max<hsize_t>(n, 1);
    h5::Handle mspace = h5::space(H5Screate_simple(1, &mem_n, nullptr), what);
    if (n == 0) {
      H5Sselect_none(fspace);
      H5Sselect_none(mspace);
    } else {
      h5::check_status(
          H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr), what);
    }
    static const char dummy[64] = {};
    h5::check_status(H5Dwrite(ds, mem_type, mspace, fspace, transfer, data ? data : dummy), what);
  }
};

namespace {

// Rank 0: an exclusive flock on PATH.lock held for the writer's life, with "pid@host" of the
// holder written into it. "" when taken (or when the file system has no locks: then unguarded);
// the one error line when a live run holds it.
std::string lock_result_file(const std::string& path, int* fd_out) {
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return "";  // an unwritable directory: creating the file says so below
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[128] = {0};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return "";  // no locks here (ENOLCK, ENOSYS): go on unguarded
    const std::string who = n > 0 ? std::string(holder, size_t(n)) : std::string("unknown");
    return "another run is writing '" + path + "' (process " + who + " holds " + lock_path +
           "); give this run its own --out, or wait until that run ends";
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string me = std::to_string(::getpid()) + "@" + host;
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    // the holder's name is a courtesy for the error line; the lock itself holds
  }
  *fd_out = fd;
  return "";
}


// The group `name` under `root`, made if absent (a resumed launch finds its earlier one).
h5::Handle open_or_create_group(hid_t root, const char* name) {
  return h5::link_exists(root, name)
             ? h5::group(H5Gopen2(root, name, H5P_DEFAULT), std::string("open ") + name)
             : h5::group(H5Gcreate2(root, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         std::string("create ") + name);
}

// FNV-1a, 64 bits, as 16 hex digits: the configuration fingerprint.
std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string run_fingerprint(const std::string& identity, int world) {
  return fnv1a_hex(identity + "\nworld-size = " + std::to_string(world) + "\n");
}

// "key = value" lines of an INI text (sections and comments ignored).
std::map<std::string, std::string> ini_values(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  std::string line;
  auto trim = [](std::string v) {
    const auto a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : v.substr(a, b - a + 1);
  };
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || line[0] == '[' || eq == std::string::npos) continue;
    values[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return values;
}

// Rank 0, before a --resume appends to PATH: "" when the file is this run's, else why not (one
// line, with the fix). Opened read-only with the default driver: nothing is written to a file
// that is refused.
std::string check_same_run(const std::string& path, const std::string& identity, int world,
                           const std::vector<std::string>& metrics) {
  const std::string fix = ": give this run another --out, or delete the file to start it afresh";
  const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) return "cannot reopen result file '" + path + "' to append to it (not an HDF5 file?)" + fix;
  h5::Handle file(fid, H5Fclose);
  try {
    const std::string what = "result file '" + path + "' ";
    if (!h5::has_attr(file, schema::kAttrSchemaVersion) ||
        h5::read_attr_int(file, schema::kAttrSchemaVersion) != schema::kSchemaVersion)
      return what + "is not an HLP result file of schema version " +
             std::to_string(schema::kSchemaVersion) + fix;
    if (!h5::has_attr(file, schema::kAttrConfigFingerprint))
      return what + "has no configuration fingerprint (written before resumable result files), "
                    "so it cannot be told to be this run's" + fix;
    const std::string theirs = h5::read_attr_string(file, schema::kAttrConfigFingerprint);
    const std::string mine = run_fingerprint(identity, world);
    if (theirs != mine) {
      std::string diff;
      const auto stored = ini_values(h5::has_attr(file, schema::kAttrConfig)
                                         ? h5::read_attr_string(file, schema::kAttrConfig)
                                         : std::string());
      int shown = 0;
      for (const auto& [key, value] : ini_values(identity)) {
        const auto it = stored.find(key);
        const std::string old = it == stored.end() ? "(absent)" : "'" + it->second + "'";
        if (it != stored.end() && it->second == value) continue;
        if (shown++ < 3) diff += std::string(diff.empty() ? "" : ", ") + key + " " + old +
                                 " there, '" + value + "' here";
      }
      const int64_t their_world = h5::has_attr(file, schema::kAttrWorldSize)
                                      ? h5::read_attr_int(file, schema::kAttrWorldSize)
                                      : -1;
      if (their_world != world)
        diff += std::string(diff.empty() ? "" : ", ") + std::to_string(their_world) +
                " rank(s) there, " + std::to_string(world) + " here";
      if (diff.empty()) diff = "configuration fingerprint " + theirs + ", this run's " + mine;
      return what + "belongs to another run (" + diff + ")" + fix;
    }
    for (const auto& m : metrics)
      if (!h5::link_exists(file, std::string(schema::kStepsGroup) + "/" + m))
        return what + "has no /steps/" + m + " (written by another HLP build or device kind)" + fix;
    for (int r = 0; r < world; ++r)
      if (!h5::link_exists(file, std::string(schema::kTraceGroup) + "/rank" + std::to_string(r)))
        return what + "has no /trace/rank" + std::to_string(r) + fix;
    if (!h5::link_exists(file, schema::kStepIndex)) return what + "has no /steps/step" + fix;
  } catch (const UserError& e) {
    return "result file '" + path + "': " + e.what() + fix;
  }
  return "";
}

// One line per segment of a /segments text attribute.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

ResultWriter::ResultWriter(MPI_Comm comm, const std::string& path, const RunInfo& info_in,
                           const WriterOptions& options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  // No flush of open files at exit: after a failed write (or an abort) the file must stay as
  // its last successful H5Fflush left it. HDF5 would otherwise flush the failed metadata from
  // its atexit hook. Works only before HDF5's first call in the process (hlp-train's main makes
  // that call first); later it is a no-op.
  H5dont_atexit();
  h5::silence_hdf5_errors();
  // Our own communicator: the writer's collectives never interleave with other traffic on
  // the caller's (e.g. a communicator thread working on a world-sized group).
  MPI_Comm_dup(comm, &s.comm);
  comm = s.comm;
  s.path = path;
  s.options = options;
  MPI_Comm_rank(comm, &s.rank);
  MPI_Comm_size(comm, &s.world);
  if (s.options.flush_every_steps < 1) s.options.flush_every_steps = 1;

  // Metric list: the schema's, then the extras (deduplicated, order kept).
  std::set<std::string> seen;
  for (const char* m : schema::kStepMetrics) {
    s.metrics.emplace_back(m);
    seen.insert(m);
  }
  for (const auto& m : s.options.extra_metrics) {
    if (m.empty() || m == "step" || m.find('/') != std::string::npos)
      throw user_error("extra metric name '", m, "' is not usable as an HDF5 dataset name");
    if (seen.insert(m).second) s.metrics.push_back(m);
  }

  // Rank 0's view of everything that goes into attributes.
  RunInfo info = info_in;
  std::string start_time = utc_now_iso8601();
  double start_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string slurm_job = env_or_empty("SLURM_JOB_ID");
  std::string slurm_array_job = env_or_empty("SLURM_ARRAY_JOB_ID");
  std::string slurm_array_task = env_or_empty("SLURM_ARRAY_TASK_ID");
  std::string mpi_version = mpi_library_version();
  for (std::string* str : {&info.strategy, &info.backend, &info.device, &info.config_ini,
                           &info.libtorch_version, &info.peak_flops_source, &start_time,
                           &info.blas_library, &info.device_kind, &info.device_name,
                           &info.compute_capability, &info.cuda_driver_version,
                           &info.cuda_runtime_version,
                           &slurm_job, &slurm_array_job, &slurm_array_task, &mpi_version})
    bcast_string(*str, comm);
  MPI_Bcast(info.mesh.data(), 3, MPI_INT64_T, 0, comm);
  std::string mesh_axes;  // "dp,pp,tp,cp"
  for (const auto& axis : info.mesh_axes) mesh_axes += (mesh_axes.empty() ? "" : ",") + axis;
  bcast_string(mesh_axes, comm);
  int64_t mesh_axis_count = int64_t(info.mesh_sizes.size());
  MPI_Bcast(&mesh_axis_count, 1, MPI_INT64_T, 0, comm);
  info.mesh_sizes.resize(size_t(mesh_axis_count));
  MPI_Bcast(info.mesh_sizes.data(), int(mesh_axis_count), MPI_INT64_T, 0, comm);
  MPI_Bcast(&info.threads_per_rank, 1, MPI_INT64_T, 0, comm);
  int64_t thread_fields[8] = {info.threads_intra_op, info.threads_inter_op, info.threads_openmp,
                              info.blas_threads,     info.node_cores,       info.node_ranks,
                              info.node_threads_requested, info.oversubscribed ? 1 : 0};
  MPI_Bcast(thread_fields, 8, MPI_INT64_T, 0, comm);
  MPI_Bcast(&info.peak_flops_per_device, 1, MPI_DOUBLE, 0, comm);
  int64_t device_fields[3] = {info.device_count, info.devices_per_node, info.device_memory_bytes};
  MPI_Bcast(device_fields, 3, MPI_INT64_T, 0, comm);
  // The Unix time of this launch's trace time 0 (Recorder: event times are relative to the
  // aligned run start on rank 0's clock).
  double trace_epoch_unix_s = start_unix_s - (hlp::now_s() - info.clock.run_start_s);
  MPI_Bcast(&start_unix_s, 1, MPI_DOUBLE, 0, comm);
  MPI_Bcast(&trace_epoch_unix_s, 1, MPI_DOUBLE, 0, comm);
  const double start_unix_s_of_launch = start_unix_s;  // start_* become the first launch's
  const std::string launch_time = start_time;
  if (info.config_identity.empty()) info.config_identity = info.config_ini;
  bcast_string(info.config_identity, comm);
  const std::string fingerprint = run_fingerprint(info.config_identity, s.world);
  const char* restarts = std::getenv("SLURM_RESTART_COUNT");
  int64_t restart_count = restarts && *restarts ? std::atoll(restarts) : 0;
  MPI_Bcast(&restart_count, 1, MPI_INT64_T, 0, comm);
  const std::string hosts = gather_hosts(comm, s.world);
  const std::vector<double> offsets = gather_double(comm, s.world, info_in.clock.offset_s);
  const std::vector<double> rtts = gather_double(comm, s.world, info_in.clock.rtt_s);

  // Parent directory (rank 0), then the file (all).
  std::string dir_problem;
  if (s.rank == 0) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) dir_problem = "cannot create directory '" + parent.string() + "' for the result file: " +
                          ec.message();
  }
  agree_or_throw(comm, dir_problem);
  // One writer per result file, before anything touches it (the reserve, the truncation).
  agree_or_throw(comm, s.rank == 0 ? lock_result_file(path, &s.lock.fd) : std::string());
  if (s.options.reserve_bytes != 0) {  // first: if even this does not fit, the run does not start
    s.reserve_path = path + ".reserve";
    const auto metrics = static_cast<int64_t>(s.metrics.size());
    const int64_t steps = s.options.expected_steps > 0 ? s.options.expected_steps : 1000;
    s.reserve_last_resort = last_resort_bytes(s.options.flush_every_steps, metrics, s.world);
    const int64_t going_on = s.options.reserve_bytes > 0 ? round_up_4k(s.options.reserve_bytes)
                                                         : going_on_bytes(steps, metrics, s.world);
    s.io([&] {
      if (s.rank == 0) allocate_reserve(s.reserve_path, s.reserve_last_resort + going_on);
    });
    s.reserve_stage = 0;
  }

  // --resume: an existing file of this run is reopened (checked by rank 0 first, read-only).
  const int64_t from_step = s.options.append_from_step;
  int reopen = 0;
  if (from_step >= 0) {
    std::string problem;
    if (s.rank == 0 && std::filesystem::exists(path)) {
      reopen = 1;
      problem = check_same_run(path, info.config_identity, s.world, s.metrics);
    }
    MPI_Bcast(&reopen, 1, MPI_INT, 0, comm);
    bcast_string(problem, comm);  // every rank says why
    if (!problem.empty()) throw UserError(problem);
  }

  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), "file access list");
  h5::check_status(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  const hid_t fid = reopen ? H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl)
                           : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  int created = fid >= 0 ? 1 : 0, all_created = 0;
  MPI_Allreduce(&created, &all_created, 1, MPI_INT, MPI_MIN, comm);
  if (!all_created) {
    if (fid >= 0) H5Fclose(fid);
    throw user_error("cannot ", reopen ? "reopen" : "create", " result file '", path,
                     "': check that the directory is writable (--out)");
  }
  s.file = h5::Handle(fid, H5Fclose);
  s.io([&] {
    if (s.rank != 0) return;
    s.space_fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (s.space_fd < 0)
      throw IoError("open for space allocation: " + os_error_text(errno), errno);
  });
  s.read_flushed_eoa();  // a reopened file: its end of allocation so far

  // What a reopened file keeps from its earlier launches (read before the root attributes are
  // rewritten with this launch's values).
  std::vector<int64_t> seg_first;
  std::vector<double> seg_start, seg_shift;
  std::vector<int64_t> seg_restarts;
  std::vector<std::string> seg_lines;
  if (reopen) {
    s.io([&] {
      const hid_t root = s.file.get();
      if (h5::has_attr(root, schema::kAttrTraceEpochUnixS)) {
        const double first_epoch = h5::read_attr_double(root, schema::kAttrTraceEpochUnixS);
        s.trace_shift_s = trace_epoch_unix_s - first_epoch;
        trace_epoch_unix_s = first_epoch;
      }
      start_time = h5::read_attr_string(root, schema::kAttrStartTime);
      start_unix_s = h5::read_attr_double(root, schema::kAttrStartUnixS);
      s.trace_dropped = h5::read_attr_string(root, schema::kAttrTraceDropped);
      s.trace_dropped_recorded = true;  // kept as it is: a dropped trace stays dropped
      if (h5::link_exists(root, schema::kSegmentsGroup)) {
        h5::Handle g = h5::group(H5Gopen2(root, schema::kSegmentsGroup, H5P_DEFAULT),
                                 "open /segments");
        seg_first = h5::read_attr_ints(g, schema::kSegFirstStep);
        seg_start = h5::read_attr_doubles(g, schema::kSegStartUnixS);
        seg_shift = h5::read_attr_doubles(g, schema::kSegTraceShiftS);
        seg_restarts = h5::read_attr_ints(g, schema::kSegSlurmRestartCount);
        seg_lines = split_lines(h5::read_attr_string(g, schema::kSegLaunches));
      }
    });
    // segments whose steps all go (they start at or after the resumed step) are dropped
    size_t keep = 0;
    while (keep < seg_first.size() && seg_first[keep] < from_step) ++keep;
    seg_first.resize(keep);
    seg_start.resize(keep);
    seg_shift.resize(keep);
    seg_restarts.resize(keep);
    seg_lines.resize(keep);
  }
  const int64_t first_step = reopen ? from_step : std::max<int64_t>(0, from_step);
  seg_first.push_back(first_step);
  seg_start.push_back(start_unix_s_of_launch);
  seg_shift.push_back(s.trace_shift_s);
  seg_restarts.push_back(restart_count);
  seg_lines.push_back("first_step=" + std::to_string(first_step) + " start=" + launch_time +
                      " slurm_job=" + (slurm_job.empty() ? "-" : slurm_job) +
                      " restart=" + std::to_string(restart_count) + " hosts=" + hosts +
                      " mpi=" + mpi_version.substr(0, mpi_version.find('\n')));
  s.xfer = h5::plist(H5Pcreate(H5P_DATASET_XFER), "transfer list");
  h5::check_status(H5Pset_dxpl_mpio(s.xfer, s.options.collective_writes ? H5FD_MPIO_COLLECTIVE
                                                                      : H5FD_MPIO_INDEPENDENT),
                   "H5Pset_dxpl_mpio");
  s.xfer_indep = h5::plist(H5Pcreate(H5P_DATASET_XFER), "transfer list");
  h5::check_status(H5Pset_dxpl_mpio(s.xfer_indep, H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio");

  // Root attributes.
  const hid_t root = s.file.get();
  h5::write_attr(root, schema::kAttrSchemaVersion, schema::kSchemaVersion);
  h5::write_attr(root, schema::kAttrHlpVersion, std::string(hlp::kVersion));
  h5::write_attr(root, schema::kAttrGitCommit, std::string(hlp::kGitCommit));
  h5::write_attr(root, schema::kAttrComplete, int64_t{0});
  h5::write_attr(root, schema::kAttrWorldSize, static_cast<int64_t>(s.world));
  h5::write_attr(root, schema::kAttrMesh, std::vector<int64_t>(info.mesh.begin(), info.mesh.end()));
  if (!info.mesh_sizes.empty()) {
    h5::write_attr(root, schema::kAttrMeshAxes, mesh_axes);
    h5::write_attr(root, schema::kAttrMeshSizes, info.mesh_sizes);
  }
  h5::write_attr(root, schema::kAttrStrategy, info.strategy);
  h5::write_attr(root, schema::kAttrBackend, info.backend);
  h5::write_attr(root, schema::kAttrDevice, info.device);
  h5::write_attr(root, schema::kAttrConfig, info.config_ini);
  h5::write_attr(root, schema::kAttrHosts, hosts);
  h5::write_attr(root, schema::kAttrSlurmJobId, slurm_job);
  h5::write_attr(root, schema::kAttrSlurmArrayJobId, slurm_array_job);
  h5::write_attr(root, schema::kAttrSlurmArrayTaskId, slurm_array_task);
  h5::write_attr(root, schema::kAttrTorchVersion, info.libtorch_version);
  h5::write_attr(root, schema::kAttrMpiVersion, mpi_version);
  h5::write_attr(root, schema::kAttrHdf5Version, h5::hdf5_version());
  h5::write_attr(root, schema::kAttrStartTime, start_time);  // the first launch's
  h5::write_attr(root, schema::kAttrEndTime, std::string());
  h5::write_attr(root, schema::kAttrStartUnixS, start_unix_s);
  h5::write_attr(root, schema::kAttrTraceEpochUnixS, trace_epoch_unix_s);
  h5::write_attr(root, schema::kAttrConfigFingerprint, fingerprint);
  h5::write_attr(root, schema::kAttrThreadsPerRank, info.threads_per_rank);
  h5::write_attr(root, schema::kAttrThreadsIntraOp, thread_fields[0]);
  h5::write_attr(root, schema::kAttrThreadsInterOp, thread_fields[1]);
  h5::write_attr(root, schema::kAttrThreadsOpenmp, thread_fields[2]);
  h5::write_attr(root, schema::kAttrBlasLibrary, info.blas_library);
  h5::write_attr(root, schema::kAttrBlasThreads, thread_fields[3]);
  h5::write_attr(root, schema::kAttrNodeCores, thread_fields[4]);
  h5::write_attr(root, schema::kAttrNodeRanks, thread_fields[5]);
  h5::write_attr(root, schema::kAttrNodeThreadsRequested, thread_fields[6]);
  h5::write_attr(root, schema::kAttrOversubscribed, thread_fields[7]);
  h5::write_attr(root, schema::kAttrStoppedReason, std::string());
  h5::write_attr(root, schema::kAttrTraceDropped, s.trace_dropped);
  h5::write_attr(root, schema::kAttrPeakFlopsPerDevice, info.peak_flops_per_device);
  h5::write_attr(root, schema::kAttrPeakFlopsSource, info.peak_flops_source);
  h5::write_attr(root, schema::kAttrFlushEvery, static_cast<int64_t>(s.options.flush_every_steps));
  h5::write_attr(root, schema::kAttrClockOffsetS, offsets);
  h5::write_attr(root, schema::kAttrClockRttS, rtts);
  h5::write_attr(root, schema::kAttrDeviceKind, info.device_kind);
  h5::write_attr(root, schema::kAttrDeviceName, info.device_name);
  h5::write_attr(root, schema::kAttrDeviceCount, device_fields[0]);
  h5::write_attr(root, schema::kAttrDevicesPerNode, device_fields[1]);
  h5::write_attr(root, schema::kAttrDeviceMemoryBytes, device_fields[2]);
  h5::write_attr(root, schema::kAttrComputeCapability, info.compute_capability);
  h5::write_attr(root, schema::kAttrCudaDriverVersion, info.cuda_driver_version);
  h5::write_attr(root, schema::kAttrCudaRuntimeVersion, info.cuda_runtime_version);

  if (reopen) {
    s.reopen_layout(from_step);
  } else {
    // /steps/<metric>: float64 [world, 0 -> unlimited], NaN where a rank reported nothing.
    {
      h5::Handle g = h5::group(H5Gcreate2(root, schema::kStepsGroup, H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT), "create /steps");
      const hsize_t chunk_steps = static_cast<hsize_t>(std::max(16, s.options.flush_every_steps));
      const hsize_t dims[2] = {static_cast<hsize_t>(s.world), 0};
      const hsize_t maxdims[2] = {static_cast<hsize_t>(s.world), H5S_UNLIMITED};
      const hsize_t chunk[2] = {static_cast<hsize_t>(s.world), chunk_steps};
      h5::Handle sp = h5::space(H5Screate_simple(2, dims, maxdims), "steps space");
      h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "steps dcpl");
      H5Pset_chunk(dcpl, 2, chunk);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan);  // what readers see of unallocated chunks
      // Parallel HDF5 allocates chunks early; writing fill values into each newly allocated chunk
      // made every H5Dset_extent a collective write (~0.1 s each at 4 ranks on 2 cores). Every
      // cell is written right after the extension anyway (NaN where a rank had no value).
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
      for (const auto& m : s.metrics) {
        s.metric_ds.emplace(m, h5::dataset(H5Dcreate2(g, m.c_str(), H5T_IEEE_F64LE, sp, H5P_DEFAULT,
                                                      dcpl, H5P_DEFAULT),
                                           "create /steps/" + m));
      }
      const hsize_t dims1[1] = {0}, maxdims1[1] = {H5S_UNLIMITED}, chunk1[1] = {chunk_steps};
      h5::Handle sp1 = h5::space(H5Screate_simple(1, dims1, maxdims1), "step index space");
      h5::Handle dcpl1 = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "step index dcpl");
      H5Pset_chunk(dcpl1, 1, chunk1);
      H5Pset_fill_time(dcpl1, H5D_FILL_TIME_NEVER);
      s.step_index_ds = h5::dataset(H5Dcreate2(root, schema::kStepIndex, H5T_STD_I64LE, sp1,
                                               H5P_DEFAULT, dcpl1, H5P_DEFAULT),
                                    "create /steps/step");
    }

    // /trace/rank<N>: compound rows, 0 -> unlimited, one dataset per rank (created by all).
    {
      h5::Handle g = h5::group(H5Gcreate2(root, schema::kTraceGroup, H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT), "create /trace");
      s.trace_type = make_trace_row_type();
      const hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {1024};
      h5::Handle sp = h5::space(H5Screate_simple(1, dims, maxdims), "trace space");
      h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "trace dcpl");
      H5Pset_chunk(dcpl, 1, chunk);
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);  // as /steps: every row is written right away
      for (int r = 0; r < s.world; ++r) {
        const std::string name = "rank" + std::to_string(r);
        s.trace_ds.push_back(h5::dataset(
            H5Dcreate2(g, name.c_str(), s.trace_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT),
            "create /trace/" + name));
      }
      s.trace_rows.assign(static_cast<size_t>(s.world), 0);
    }
  }

  // /segments: this launch beside the earlier ones it appends to
  {
    h5::Handle g = open_or_create_group(root, schema::kSegmentsGroup);
    std::string launches;
    for (const auto& line : seg_lines) launches += line + "\n";
    h5::write_attr(g, schema::kSegFirstStep, seg_first);
    h5::write_attr(g, schema::kSegStartUnixS, seg_start);
    h5::write_attr(g, schema::kSegTraceShiftS, seg_shift);
    h5::write_attr(g, schema::kSegSlurmRestartCount, seg_restarts);
    h5::write_attr(g, schema::kSegLaunches, launches);
  }
  s.flush_file();
}

ResultWriter::~ResultWriter() {
  State& s = *state_;
  if (s.finished || (std::uncaught_exceptions() == 0 && !s.broken))
    return;  // Handles close it (collective)
  // Unwinding an error: other ranks may not be in step, and H5Fclose is collective, so closing
  // here could hang. Leave the file as the last flush left it (complete = 0): the process is
  // about to report the error and exit; HDF5 closes what is left at MPI_Finalize.
  for (auto& kv : s.metric_ds) kv.second.release();
  for (auto& h : s.trace_ds) h.release();
  s.step_index_ds.release();
  s.file.release();
  s.leak_comm = true;
}

void ResultWriter::write_model(const ModelInfo& model_in, int64_t params_local) {
  State& s = *state_;
  ModelInfo m = model_in;
  for (std::string* str : {&m.name, &m.pattern, &m.flops_convention, &m.plan_device})
    bcast_string(*str, s.comm);
  MPI_Bcast(&m.plan_step_s, 1, MPI_DOUBLE, 0, s.comm);
  MPI_Bcast(&m.plan_tokens_per_s, 1, MPI_DOUBLE, 0, s.comm);
  MPI_Bcast(&m.params_total, 1, MPI_INT64_T, 0, s.comm);
  MPI_Bcast(&m.params_trainable, 1, MPI_INT64_T, 0, s.comm);
  MPI_Bcast(&m.flops_per_token, 1, MPI_DOUBLE, 0, s.comm);
  MPI_Bcast(&m.flops_per_token_executed, 1, MPI_DOUBLE, 0, s.comm);
  // the probe ran on every rank; rank 0's numbers are written (a loader thread allocating
  // during another rank's probe could make them differ by a few bytes)
  for (auto* v : {&m.activation_saved_bytes, &m.activation_saved_checkpointed_bytes,
                  &m.activation_transient_bytes})
    if (!v->empty()) MPI_Bcast(v->data(), int(v->size()), MPI_DOUBLE, 0, s.comm);
  std::vector<int64_t> per_rank(static_cast<size_t>(s.world));
  MPI_Allgather(&params_local, 1, MPI_INT64_T, per_rank.data(), 1, MPI_INT64_T, s.comm);

  const hid_t root = s.file.get();
  h5::Handle g = open_or_create_group(root, schema::kModelGroup);
  h5::write_attr(g, schema::kModelName, m.name);
  h5::write_attr(g, schema::kPattern, m.pattern);
  h5::write_attr(g, schema::kAttnImpl, m.attn_impl);
  h5::write_attr(g, schema::kParamsTotal, m.params_total);
  h5::write_attr(g, schema::kParamsTrainable, m.params_trainable);
  h5::write_attr(g, schema::kFlopsPerToken, m.flops_per_token);
  h5::write_attr(g, schema::kFlopsPerTokenExecuted, m.flops_per_token_executed);
  h5::write_attr(g, schema::kFlopsConvention, m.flops_convention);
  h5::write_attr(g, schema::kParamsPerRank, per_rank);
  h5::write_attr(g, schema::kPlanDevice, m.plan_device);
  h5::write_attr(g, schema::kPlanStepS, m.plan_step_s);
  h5::write_attr(g, schema::kPlanTokensPerS, m.plan_tokens_per_s);
  if (!m.activation_kinds.empty()) {  // every rank probed the same kinds: identical values
    std::string kinds;
    for (const auto& k : m.activation_kinds) kinds += (kinds.empty() ? "" : ",") + k;
    h5::write_attr(g, schema::kActivationKinds, kinds);
    h5::write_attr(g, schema::kActivationSaved, m.activation_saved_bytes);
    h5::write_attr(g, schema::kActivationSavedCkpt, m.activation_saved_checkpointed_bytes);
    h5::write_attr(g, schema::kActivationTransient, m.activation_transient_bytes);
    h5::write_attr(g, schema::kActivationProbeLengths, m.activation_probe_lengths);
  }
  s.flush_file();
}

void ResultWriter::write_pipeline(const PipelineInfo& p_in) {
  State& s = *state_;
  PipelineInfo p = p_in;
  for (std::string* str : {&p.schedule, &p.split}) bcast_string(*str, s.comm);
  auto bcast_vec = [&](auto& v, MPI_Datatype t) {
    int64_t n = static_cast<int64_t>(v.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, s.comm);
    v.resize(static_cast<size_t>(n));
    if (n > 0) MPI_Bcast(v.data(), static_cast<int>(n), t, 0, s.comm);
  };
  bcast_vec(p.stage_first_layer, MPI_INT64_T);
  bcast_vec(p.stage_cost, MPI_DOUBLE);
  bcast_vec(p.stage_cost_measured_s, MPI_DOUBLE);
  bcast_vec(p.stage_cpu_measured_s, MPI_DOUBLE);
  MPI_Bcast(&p.bubble_fraction, 1, MPI_DOUBLE, 0, s.comm);
  MPI_Bcast(&p.bubble_fraction_theory, 1, MPI_DOUBLE, 0, s.comm);
  MPI_Bcast(&p.micro_batches, 1, MPI_INT64_T, 0, s.comm);
  MPI_Bcast(&p.virtual_chunks, 1, MPI_INT64_T, 0, s.comm);
  MPI_Bcast(&p.bubble_fraction_simulated, 1, MPI_DOUBLE, 0, s.comm);

  const hid_t root = s.file.get();
  h5::Handle g = open_or_create_group(root, schema::kPipelineGroup);
  h5::write_attr(g, schema::kStageFirstLayer, p.stage_first_layer);
  h5::write_attr(g, schema::kStageCost, p.stage_cost);
  h5::write_attr(g, schema::kStageCostMeasured, p.stage_cost_measured_s);
  h5::write_attr(g, schema::kStageCpuMeasured, p.stage_cpu_measured_s);
  h5::write_attr(g, schema::kBubbleFraction, p.bubble_fraction);
  h5::write_attr(g, schema::kBubbleFractionTheory, p.bubble_fraction_theory);
  h5::write_attr(g, schema::kSchedule, p.schedule);
  h5::write_attr(g, schema::kSplit, p.split);
  h5::write_attr(g, schema::kMicroBatches, p.micro_batches);
  h5::write_attr(g, schema::kVirtualChunks, p.virtual_chunks);
  h5::write_attr(g, schema::kBubbleFractionSimulated, p.bubble_fraction_simulated);
  s.flush_file();
}

void ResultWriter::write_context_parallel(const ContextParallelInfo& info) {
  // Metadata writes are collective in parallel HDF5: every rank writes the same values (the
  // caller gathered them on every rank).
  State& s = *state_;
  {
    const hid_t root = s.file.get();
    // a resumed launch writes over its earlier launch's totals
    h5::Handle g = open_or_create_group(root, schema::kContextParallelGroup);
    std::string kinds;
    for (const auto& k : info.exchange_kinds) kinds += (kinds.empty() ? "" : ",") + k;
    h5::write_attr(g, schema::kCpSize, info.cp);
    h5::write_attr(g, schema::kCpLayout, info.layout);
    h5::write_attr(g, schema::kCpScheme, info.scheme);
    h5::write_attr(g, schema::kCpAttentionScheme, info.attention_scheme);
    h5::write_attr(g, schema::kCpExchangeKinds, kinds);
    h5::write_attr(g, schema::kCpBytesSent, info.bytes_sent);
    h5::write_attr(g, schema::kCpAttentionEntries, info.attention_score_entries);
    h5::write_attr(g, schema::kCpAttentionSeconds, info.attention_s);
    h5::write_attr(g, schema::kCpStateChainSeconds, info.state_chain_s);
    h5::write_attr(g, schema::kCpSteps, info.steps);
  }
  s.flush_file();
}

void ResultWriter::write_experts(const ExpertsInfo& info) {
  State& s = *state_;
  const int world = s.world;
  const hsize_t L = hsize_t(info.layers.size()), E = hsize_t(info.experts);
  const hid_t root = s.file.get();
  s.io([&] {
    // a resumed launch writes over its earlier launch's table
    if (h5::link_exists(root, schema::kExpertsGroup))
      h5::check_status(H5Ldelete(root, schema::kExpertsGroup, H5P_DEFAULT), "delete /experts");
    h5::Handle g = open_or_create_group(root, schema::kExpertsGroup);
    h5::write_attr(g, schema::kExpertsCount, info.experts);
    h5::write_attr(g, schema::kExpertsTopK, info.top_k);
    h5::write_attr(g, schema::kEpSize, info.ep);
    h5::write_attr(g, schema::kExpertsLayers, info.layers);
    h5::write_attr(g, schema::kExpertsFirstStep, info.first_step);
    h5::write_attr(g, schema::kExpertsAllToAllBytes, info.all_to_all_bytes);
    auto table = [&](const char* name, hsize_t rows, const std::vector<int64_t>& data) {
      const hsize_t dims[3] = {rows, L, E};
      h5::Handle space = h5::space(H5Screate_simple(3, dims, nullptr), name);
      h5::Handle ds = h5::dataset(H5Dcreate2(g, name, H5T_STD_I64LE, space, H5P_DEFAULT,
                                             H5P_DEFAULT, H5P_DEFAULT),
                                  std::string("create /experts/") + name);
      // rank 0 writes every element, the others nothing
      const hsize_t start[3] = {0, 0, 0};
      const hsize_t count[3] = {s.rank == 0 ? rows : 0, L, E};
      s.write_slab(ds, H5T_NATIVE_INT64, data.empty() ? nullptr : data.data(), 3, start, count,
                   std::string("write /experts/") + name, s.xfer);
    };
    table(schema::kExpertsTokens, hsize_t(info.steps()), info.tokens);
    table(schema::kExpertsRankTokens, hsize_t(world), info.rank_tokens);
  });
  s.flush_file();
}

void ResultWriter::append_step(const StepRecord& row) { state_->steps.push_back(row); }

void ResultWriter::append_events(std::vector<TraceEvent> events) {
  auto& buf = state_->events;
  if (buf.empty()) {
    buf = std::move(events);
  } else {
    buf.insert(buf.end(), std::make_move_iterator(events.begin()),
               std::make_move_iterator(events.end()));
  }
}

void ResultWriter::append(Recorder& recorder) {
  for (auto& row : recorder.take_steps()) append_step(row);
  append_events(recorder.take_events());
  if (buffered_steps() >= state_->options.flush_every_steps) flush();
}

// Steps first, then the trace, each followed by its own H5Fflush: when the disk fills up, the
// steps (small, and what the analysis needs) are already on disk and only the trace is lost.
void ResultWriter::flush() {
  State& s = *state_;
  if (s.finished) return;
  if (s.broken) throw UserError("result file '" + s.path + "': an earlier write failed");

  // 1. Every rank must hold the same number of buffered steps and only known metric names.
  std::string problem;
  const int64_t count = static_cast<int64_t>(s.steps.size());
  int64_t min_count = 0, max_count = 0;
  MPI_Allreduce(&count, &min_count, 1, MPI_INT64_T, MPI_MIN, s.comm);
  MPI_Allreduce(&count, &max_count, 1, MPI_INT64_T, MPI_MAX, s.comm);
  if (min_count != max_count) {
    problem = "result writer: ranks buffered different numbers of steps (" +
              std::to_string(min_count) + " vs " + std::to_string(max_count) +
              "); every rank must record every step";
  }
  for (const auto& row : s.steps) {
    for (const auto& kv : row.values) {
      if (problem.empty() && !s.metric_ds.count(kv.first))
        problem = "unknown step metric '" + kv.first +
                  "': use a name from metrics/schema.h or declare it in "
                  "WriterOptions::extra_metrics";
    }
  }
  agree_or_throw(s.comm, problem);

  // 2. Room on disk for everything this flush adds, before anything is written: out of space
  // here drops the trace (State::io) and the steps go on.
  const int64_t local_events = static_cast<int64_t>(s.events.size());
  std::vector<int64_t> counts(static_cast<size_t>(s.world));
  MPI_Allgather(&local_events, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, s.comm);
  const bool any_events =
      std::any_of(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });
  s.ensure_space([&] {
    const auto metrics = static_cast<int64_t>(s.metrics.size());
    int64_t bytes = s.metadata_growth() + 2 * metrics * s.world * 8 * (count + 16);
    if (s.trace_dropped.empty() && any_events)
      for (int64_t c : counts)
        bytes += 2 * ((c + 1024) * static_cast<int64_t>(sizeof(TraceRow)) + 2616);
    return bytes;
  });

  // 3. Steps: extend every matrix to [world, written + count], each rank writes its row.
  if (count > 0) {
    const hsize_t new_steps = static_cast<hsize_t>(s.steps_written + count);
    const hsize_t dims[2] = {static_cast<hsize_t>(s.world), new_steps};
    for (const auto& m : s.metrics) {
      const hid_t ds = s.metric_ds.at(m).get();
      s.attempt([&] { h5::check_status(H5Dset_extent(ds, dims), "extend /steps/" + m); });
    }
    s.attempt([&] {
      h5::check_status(H5Dset_extent(s.step_index_ds, &new_steps), "extend /steps/step");
    });
    const hsize_t start[2] = {static_cast<hsize_t>(s.rank), static_cast<hsize_t>(s.steps_written)};
    const hsize_t cnt[2] = {1, static_cast<hsize_t>(count)};
    std::vector<double> row(static_cast<size_t>(count));
    for (const auto& m : s.metrics) {
      // step_end is a time since the run start, as the trace's: a resumed launch's is shifted
      const double shift = m == schema::kStepEnd ? s.trace_shift_s : 0.0;
      for (int64_t i = 0; i < count; ++i) {
        const auto& vals = s.steps[static_cast<size_t>(i)].values;
        auto it = vals.find(m);
        row[static_cast<size_t>(i)] =
            it == vals.end() ? std::numeric_limits<double>::quiet_NaN() : it->second + shift;
      }
      s.attempt([&] {
        s.write_slab(s.metric_ds.at(m), H5T_NATIVE_DOUBLE, row.data(), 2, start, cnt,
                     "write /steps/" + m, s.xfer);
      });
      auto& hist = s.history[m];
      hist.insert(hist.end(), row.begin(), row.end());
    }
    // /steps/step from rank 0's records.
    std::vector<int64_t> step_numbers;
    for (const auto& r : s.steps) step_numbers.push_back(r.step);
    const hsize_t start1[1] = {static_cast<hsize_t>(s.steps_written)};
    const hsize_t cnt1[1] = {s.rank == 0 ? static_cast<hsize_t>(count) : 0};
    s.attempt([&] {
      s.write_slab(s.step_index_ds, H5T_NATIVE_INT64, step_numbers.data(), 1, start1, cnt1,
                   "write /steps/step", s.xfer);
    });
    s.agree();
    s.steps_written += count;
    s.steps.clear();
    s.flush_file(/*space_ensured=*/true);
  }

  // 4. Trace: extend every rank's dataset by its count, each rank writes its own. Once dropped
  // (out of space in ensure_space, see State::io) the trace is written no more. Every flag and
  // count below is the same on every rank, so all decide alike.
  const bool trace_was_on = s.trace_dropped.empty();
  if (trace_was_on && any_events) {
    for (int r = 0; r < s.world; ++r) {
      const int64_t n = counts[static_cast<size_t>(r)];
      if (n == 0) continue;
      const hsize_t new_rows = static_cast<hsize_t>(s.trace_rows[static_cast<size_t>(r)] + n);
      s.attempt([&] {
        h5::check_status(H5Dset_extent(s.trace_ds[static_cast<size_t>(r)], &new_rows),
                         "extend /trace/rank" + std::to_string(r));
      });
    }
    s.agree();
    {
      std::vector<TraceRow> rows = to_trace_rows(s.events);
      if (s.trace_shift_s != 0)  // a resumed launch: onto the first launch's time axis
        for (auto& row : rows) {
          row.start_s += s.trace_shift_s;
          row.end_s += s.trace_shift_s;
        }
      const int64_t n = counts[static_cast<size_t>(s.rank)];
      s.attempt([&] {  // independent: each rank writes its own dataset; the extents were collective
        if (n == 0) return;
        const hsize_t start[1] = {static_cast<hsize_t>(s.trace_rows[static_cast<size_t>(s.rank)])};
        const hsize_t cnt[1] = {static_cast<hsize_t>(n)};
        s.write_slab(s.trace_ds[static_cast<size_t>(s.rank)], s.trace_type, rows.data(), 1,
                     start, cnt, "write /trace/rank" + std::to_string(s.rank), s.xfer_indep);
      });
      s.agree();
      for (int r = 0; r < s.world; ++r)
        s.trace_rows[static_cast<size_t>(r)] += counts[static_cast<size_t>(r)];
    }
  }
  s.events.clear();
  const bool record_drop = !s.trace_dropped.empty() && !s.trace_dropped_recorded;
  if (record_drop) {
    // The trace is dropped only in ensure_space(), before any extent of a flush changes: each
    // /trace/rank<N> holds whole rows. The reason goes beside `complete`.
    s.io([&] { h5::write_attr(s.file, schema::kAttrTraceDropped, s.trace_dropped); });
    s.trace_dropped_recorded = true;
  }
  if ((trace_was_on && any_events) || count == 0 || record_drop)
    s.flush_file(/*space_ensured=*/true);
}

void ResultWriter::set_stopped_reason(const std::string& reason_in) {
  State& s = *state_;
  if (s.finished) return;
  std::string reason = reason_in;
  bcast_string(reason, s.comm);
  h5::write_attr(s.file, schema::kAttrStoppedReason, reason);
  s.flush_file();
}

void ResultWriter::finish() {
  State& s = *state_;
  if (s.finished) return;
  flush();
  write_summary();
  std::string end_time = utc_now_iso8601();
  bcast_string(end_time, s.comm);
  h5::write_attr(s.file, schema::kAttrEndTime, end_time);
  h5::write_attr(s.file, schema::kAttrComplete, int64_t{1});
  s.flush_file();  // H5Fclose's own flush reports no error through the Handle: do it here
  s.finished = true;
  s.release_reserve_file();
  s.metric_ds.clear();
  s.trace_ds.clear();
  s.step_index_ds.reset();
  s.trace_type.reset();
  s.xfer.reset();
  s.xfer_indep.reset();
  s.file.reset();  // H5Fclose: collective, writes everything
  s.release_unused_space();
}

void ResultWriter::write_summary() {
  State& s = *state_;
  const int64_t skip = std::max<int64_t>(
      0, std::min<int64_t>(s.options.summary_skip_steps, s.steps_written - 1));
  const size_t nm = s.metrics.size();
  // local medians [metrics] -> all ranks' [world, metrics]
  std::vector<double> local(nm);
  for (size_t i = 0; i < nm; ++i) {
    const auto& hist = s.history[s.metrics[i]];
    std::vector<double> used;
    if (static_cast<int64_t>(hist.size()) > skip) used.assign(hist.begin() + skip, hist.end());
    local[i] = median_ignoring_nan(std::move(used));
  }
  std::vector<double> all(nm * static_cast<size_t>(s.world));
  MPI_Allgather(local.data(), static_cast<int>(nm), MPI_DOUBLE, all.data(), static_cast<int>(nm),
                MPI_DOUBLE, s.comm);
  const hid_t root = s.file.get();
  h5::Handle g = h5::group(H5Gcreate2(root, schema::kSummaryGroup, H5P_DEFAULT, H5P_DEFAULT,
                                      H5P_DEFAULT), "create /summary");
  h5::write_attr(g, schema::kSummarySkipSteps, skip);
  h5::write_attr(g, schema::kSummaryStepsUsed, s.steps_written - skip);
  for (size_t i = 0; i < nm; ++i) {
    std::vector<double> per_rank(static_cast<size_t>(s.world));
    double max_over_ranks = std::numeric_limits<double>::quiet_NaN();
    for (int r = 0; r < s.world; ++r) {
      const double v = all[static_cast<size_t>(r) * nm + i];
      per_rank[static_cast<size_t>(r)] = v;
      if (!std::isnan(v) && (std::isnan(max_over_ranks) || v > max_over_ranks)) max_over_ranks = v;
    }
    h5::write_attr(g, s.metrics[i] + schema::kMedianPerRankSuffix, per_rank);
    h5::write_attr(g, s.metrics[i] + schema::kMedianMaxSuffix, max_over_ranks);
  }
}

int64_t ResultWriter::steps_written() const { return state_->steps_written; }
int64_t ResultWriter::buffered_steps() const {
  return static_cast<int64_t>(state_->steps.size());
}
const std::string& ResultWriter::path() const { return state_->path; }
const std::string& ResultWriter::trace_dropped() const { return state_->trace_dropped; }

}  // namespace hlp::metrics
