#pragma once
// write_file_atomically(): PATH ends up holding either its old content or all of `bytes`, never
// a part. The bytes go to PATH.tmp (open, write loop, fsync, close), which then replaces PATH by
// rename; the directory is fsync-ed so the rename survives a crash. Any failure (disk full,
// quota, I/O error) removes PATH.tmp, leaves PATH as it was, and throws hlp::IoError naming
// PATH and the OS reason. Used for checkpoints, where a failed write must leave the previous
// checkpoint usable.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/os_error.h"

namespace hlp {

namespace atomic_file_detail {

inline void fail(const std::string& tmp, const std::string& what, const std::string& path,
                 int err) {
  ::unlink(tmp.c_str());
  throw IoError("cannot " + what + " '" + path + "': " + os_error_text(err), err);
}

}  // namespace atomic_file_detail

inline void write_file_atomically(const std::string& path, std::string_view bytes) {
  using atomic_file_detail::fail;
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "create", tmp, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // write() returning 0 for a non-empty buffer: treat as out of space
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail(tmp, "write", path, err);
    }
    done += static_cast<size_t>(n);
  }
  // fsync reports errors a write deferred (NFS, Lustre and quota often report only here).
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(tmp, "write", path, err);
  }
  if (::close(fd) != 0) fail(tmp, "write", path, errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(tmp, "replace", path, errno);
  // The rename itself is durable once the directory is synced; a failure here changes nothing
  // that a reader sees, so it is not an error.
  const std::string::size_type slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace hlp
