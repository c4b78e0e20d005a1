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

// Builds a message from streamable parts: throw user_error("--tp ", tp, " does not divide ", n);
template <typename... Parts>
UserError user_error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return UserError(os.str());
}

}  // namespace hlp
