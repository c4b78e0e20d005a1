#pragma once
// The message of a Boost.Program_options error, safe for any command line or INI file.
//
// Boost builds what() by replacing the %placeholders% of a message template (%canonical_option%,
// %value%, %invalid_line% ...) with text from the input, each until none is left
// (error_with_option_name::replace_token, Boost 1.74): when that text itself holds the
// placeholder (an INI line `x = %value%` with a bad value, an invalid line '%invalid_line%'),
// what() never returns. Fuzzing found it (tests/fuzz/regressions/train_ini/). This writes every
// '%' of the substituted text as U+FF05 (FULLWIDTH PERCENT SIGN) before asking for the message.
#include <boost/program_options/errors.hpp>

#include <map>
#include <string>

namespace hlp::cli {

inline std::string program_options_message(boost::program_options::error& e) {
  namespace po = boost::program_options;
  auto* named = dynamic_cast<po::error_with_option_name*>(&e);
  if (!named) return e.what();  // a fixed message
  // The substitutions are protected; a pointer to the member, formed in a derived class, reads them.
  struct Substitutions : po::error_with_option_name {
    static std::map<std::string, std::string>& of(po::error_with_option_name& error) {
      return error.*(&Substitutions::m_substitutions);
    }
  };
  for (auto& [placeholder, text] : Substitutions::of(*named)) {
    std::string defused;
    for (char c : text) defused += c == '%' ? std::string("\xEF\xBC\x85") : std::string(1, c);
    text = defused;
  }
  return e.what();
}

}  // namespace hlp::cli
