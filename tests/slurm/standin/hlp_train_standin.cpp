// A STAND-IN for hlp-train, used ONLY by the tests of hlp-sweep's mechanics (rendered scripts,
// job arrays, afterok dependencies, failure reporting, USR1 forwarding and requeue). It trains
// nothing. It is a real MPI program: every rank takes part in MPI_Allreduce, the world size is
// checked against the rank count hlp-sweep wrote into the per-task INI, and rank 0 writes an
// HDF5 file with the root attributes of the result-file contract (strategy, world_size, complete).
//
//   hlp-train --config FILE.ini --out FILE.h5 --checkpoint-dir DIR [--resume]
// Environment knobs for the tests:
//   HLP_STANDIN_FAIL_STRATEGY=ddp   configurations with this strategy exit with status 3
//   HLP_STANDIN_STEP_S=0.5          seconds per fake step (default 0); on SIGUSR1 the stand-in
//                                   writes DIR/step.txt at the next step and exits 75
//                                   (EX_TEMPFAIL: "checkpointed, not finished, resume me")
#include <hdf5.h>
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

namespace {

volatile std::sig_atomic_t usr1_received = 0;
void on_usr1(int) { usr1_received = 1; }

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void write_string_attribute(hid_t file, const char* name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() + 1);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, value.c_str());
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void write_int_attribute(hid_t file, const char* name, long long value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, name, H5T_NATIVE_LLONG, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_LLONG, &value);
  H5Aclose(attr);
  H5Sclose(space);
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGUSR1, on_usr1);  // before MPI_Init: a USR1 during start-up must not kill us
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  std::string config_path, out_path, checkpoint_dir;
  bool resume = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config_path = argv[++i];
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--checkpoint-dir" && i + 1 < argc) checkpoint_dir = argv[++i];
    else if (a == "--resume") resume = true;
  }
  std::ifstream config(config_path);
  if (!config) {
    if (rank == 0) std::fprintf(stderr, "stand-in hlp-train: cannot read --config '%s'\n", config_path.c_str());
    MPI_Finalize();
    return 2;
  }
  std::string strategy = "single", ini_text;
  long long steps = 3, expected_ranks = -1;
  for (std::string line; std::getline(config, line);) {
    ini_text += line + "\n";
    size_t with = line.find("run with ");
    if (line.rfind("#", 0) == 0 && with != std::string::npos) expected_ranks = std::atoll(line.c_str() + with + 9);
    size_t eq = line.find('=');
    if (line.rfind("#", 0) == 0 || eq == std::string::npos) continue;
    std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "strategy") strategy = value;
    if (key == "steps") steps = std::atoll(value.c_str());
  }

  // A real collective: the sum of ranks proves every rank is in one MPI world.
  int rank_sum = 0;
  MPI_Allreduce(&rank, &rank_sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_sum != world * (world - 1) / 2 || (expected_ranks > 0 && expected_ranks != world)) {
    if (rank == 0)
      std::fprintf(stderr, "stand-in hlp-train: world size %d, rank sum %d, expected %lld ranks\n", world,
                   rank_sum, expected_ranks);
    MPI_Finalize();
    return 4;
  }
  const char* fail = std::getenv("HLP_STANDIN_FAIL_STRATEGY");
  if (fail && strategy == fail) {
    if (rank == 0) std::fprintf(stderr, "stand-in hlp-train: failing on purpose (strategy %s)\n", fail);
    MPI_Finalize();
    return 3;
  }

  long long first_step = 0;
  const std::string step_file = checkpoint_dir + "/step.txt";
  if (resume) {
    std::ifstream in(step_file);
    if (!(in >> first_step)) first_step = 0;
  }
  const char* step_s_text = std::getenv("HLP_STANDIN_STEP_S");
  const double step_s = step_s_text ? std::atof(step_s_text) : 0.0;
  if (rank == 0) std::fprintf(stderr, "stand-in hlp-train: running from step %lld\n", first_step);
  for (long long step = first_step; step < steps; ++step) {
    int stop_local = usr1_received, stop = 0;
    MPI_Allreduce(&stop_local, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (stop) {
      if (rank == 0) {
        std::ofstream(step_file) << step << "\n";
        std::fprintf(stderr, "stand-in hlp-train: USR1, checkpoint at step %lld written\n", step);
      }
      MPI_Finalize();
      return 75;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(step_s));
  }

  if (rank == 0) {
    hid_t file = H5Fcreate(out_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
      std::fprintf(stderr, "stand-in hlp-train: cannot create '%s'\n", out_path.c_str());
      MPI_Abort(MPI_COMM_WORLD, 5);
    }
    write_string_attribute(file, "strategy", strategy);
    write_string_attribute(file, "config", ini_text);
    write_string_attribute(file, "standin", "hlp-train stand-in (sweep mechanics tests only)");
    write_int_attribute(file, "world_size", world);
    write_int_attribute(file, "steps", steps);
    write_int_attribute(file, "resumed_from_step", resume ? first_step : -1);
    // /steps/loss [world_size, steps] (made-up values: this is not a trainer)
    hid_t steps_group = H5Gcreate2(file, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {static_cast<hsize_t>(world), static_cast<hsize_t>(steps)};
    std::vector<double> loss(dims[0] * dims[1], 1.0);
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dataset = H5Dcreate2(steps_group, "loss", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, loss.data());
    H5Dclose(dataset);
    H5Sclose(space);
    H5Gclose(steps_group);
    write_int_attribute(file, "complete", 1);
    H5Fclose(file);
    std::printf("stand-in hlp-train: %s on %d ranks, %lld steps -> %s\n", strategy.c_str(), world, steps,
                out_path.c_str());
  }
  MPI_Finalize();
  return 0;
}
