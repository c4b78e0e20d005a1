#pragma once
// The one error type for user mistakes (bad option, bad file, impossible mesh ...).
// `main` turns it into one line on stderr and a non-zero exit on every rank.
#include <sstream>
#include <stdexcept>
#include <string>

namespace hlp {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// The file system refused a write or a read (disk full, quota, I/O error, read-only file system):
// not the user's input, but something the user fixes outside HLP. The message names the file and
// the OS reason. Binaries exit with kExitIoError (sysexits' EX_IOERR) on every rank.
class IoError : public UserError {
 public:
  explicit IoError(const std::string& what, int os_errno = 0)
      : UserError(what), os_errno_(os_errno) {}
  int os_errno() const { return os_errno_; }  // ENOSPC, EDQUOT, EIO ...; 0 when unknown

 private:
  int os_errno_;
};
inline constexpr int kExitIoError = 74;

// Builds a message from streamable parts: throw user_error("--tp ", tp, " does not divide ", n);
template <typename... Parts>
UserError user_error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return UserError(os.str());
}

}  // namespace hlp
