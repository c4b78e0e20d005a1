// os_error.h and atomic_file.h: an I/O failure names the file and the OS reason, and a file
// written atomically holds its old content or the new one, never a part.
#include "catch_compat.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/os_error.h"

namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hlp_os_error_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("os_error: errno text with its name", "[common]") {
  CHECK(hlp::os_error_text(ENOSPC) == "No space left on device (ENOSPC)");
  CHECK(hlp::os_error_text(EDQUOT) == "Disk quota exceeded (EDQUOT)");
  CHECK(hlp::os_error_text(EIO) == "Input/output error (EIO)");
  CHECK(hlp::os_error_text(99999).find("99999") != std::string::npos);
}

TEST_CASE("os_error: the reason found in a library's error text", "[common]") {
  // HDF5's MPI-IO driver, as seen on a full tmpfs (ROMIO quotes strerror)
  const std::string mpio =
      "H5FD__mpio_write: MPI_File_write_at_all failed: MPI error string is 'Other I/O error , "
      "error stack:\nADIOI_GEN_WRITECONTIG(80): Other I/O error No space left on device'";
  CHECK(hlp::find_errno_in_text(mpio) == ENOSPC);
  // HDF5's sec2 driver
  CHECK(hlp::find_errno_in_text("file write failed: errno = 5, error message = 'Input/output "
                                "error'") == EIO);
  CHECK(hlp::find_errno_in_text("H5C_set_slist_enabled: slist already enabled?") == 0);
  CHECK(hlp::find_errno_in_text("") == 0);
}

TEST_CASE("atomic_file: writes the whole file and replaces the old one", "[common]") {
  TempDir dir;
  const std::string path = dir.path + "/latest";
  hlp::write_file_atomically(path, "step_1\n");
  CHECK(read_all(path) == "step_1\n");
  hlp::write_file_atomically(path, "step_2\n");
  CHECK(read_all(path) == "step_2\n");
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("atomic_file: a failed write keeps the old file and names the reason", "[common]") {
  TempDir dir;
  const std::string path = dir.path + "/latest";
  hlp::write_file_atomically(path, "step_1\n");
  // PATH.tmp leads to /dev/full: every write() fails with ENOSPC, as on a full disk.
  REQUIRE(::symlink("/dev/full", (path + ".tmp").c_str()) == 0);
  try {
    hlp::write_file_atomically(path, std::string(100000, 'x'));
    FAIL("no error on a full device");
  } catch (const hlp::IoError& e) {
    CHECK(e.os_errno() == ENOSPC);
    CHECK_THAT(std::string(e.what()), Catch::Contains("cannot write '" + path + "'"));
    CHECK_THAT(std::string(e.what()), Catch::Contains("No space left on device (ENOSPC)"));
  }
  CHECK(read_all(path) == "step_1\n");
  CHECK_FALSE(fs::exists(path + ".tmp"));  // the temporary is gone
}

TEST_CASE("atomic_file: a missing directory is an IoError naming it", "[common]") {
  TempDir dir;
  const std::string path = dir.path + "/no/such/dir/latest";
  try {
    hlp::write_file_atomically(path, "x");
    FAIL("no error for a missing directory");
  } catch (const hlp::IoError& e) {
    CHECK(e.os_errno() == ENOENT);
    CHECK_THAT(std::string(e.what()), Catch::Contains("No such file or directory (ENOENT)"));
    CHECK_THAT(std::string(e.what()), Catch::Contains(path + ".tmp"));
  }
}
