#pragma once
// The OS reason of a failed file operation, as one readable phrase: "No space left on device
// (ENOSPC)". Used where an error line must say WHY a write failed (disk full, quota, I/O error),
// including when the only trace of errno is text that a library wrote (HDF5's error stack quotes
// strerror() inside MPI-IO's message).
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace hlp {

inline const char* errno_name(int err) {
  switch (err) {
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EIO: return "EIO";
    case EROFS: return "EROFS";
    case EFBIG: return "EFBIG";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EEXIST: return "EEXIST";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ESTALE: return "ESTALE";
    case EINTR: return "EINTR";
    default: return nullptr;
  }
}

// "No space left on device (ENOSPC)"; "error 1234" for a code strerror does not know.
inline std::string os_error_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf); thread-safe unlike strerror.
  const char* msg = strerror_r(err, buf, sizeof buf);
  std::string out = msg ? msg : "error " + std::to_string(err);
  if (const char* name = errno_name(err)) out += std::string(" (") + name + ")";
  return out;
}

// The errno whose strerror() text occurs in `text` (the longest such text wins, so "Disk quota
// exceeded" is not mistaken for a shorter message inside it), or 0 when none does.
inline int find_errno_in_text(std::string_view text) {
  int best = 0;
  size_t best_len = 0;
  char buf[256];
  for (int err = 1; err < 134; ++err) {
    const char* msg = strerror_r(err, buf, sizeof buf);
    if (!msg || std::strncmp(msg, "Unknown error", 13) == 0) continue;
    const size_t len = std::strlen(msg);
    if (len > best_len && text.find(msg) != std::string_view::npos) {
      best = err;
      best_len = len;
    }
  }
  return best;
}

}  // namespace hlp
