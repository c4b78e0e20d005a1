// One include for every HLP test: Catch2 v2 (Debian 12: single header) or v3 (Debian 13,
// conda-forge: compiled library). The tests are written against the v2 spellings; this header
// maps the few that v3 renamed, so the same test sources build with either.
#pragma once

// HLP_CATCH2_MAJOR: the version CMake's find_package(Catch2) found (tests/CMakeLists.txt);
// without it (a compile outside CMake), the headers the compiler sees.
#if defined(HLP_CATCH2_MAJOR)
#define HLP_CATCH2_V3 (HLP_CATCH2_MAJOR >= 3)
#elif __has_include(<catch2/catch_all.hpp>)
#define HLP_CATCH2_V3 1
#else
#define HLP_CATCH2_V3 0
#endif

#if HLP_CATCH2_V3
#include <catch2/catch_all.hpp>

#include <string>

#define HLP_CATCH_VERSION_MAJOR 3
using Catch::Approx;
namespace Catch {
// v2 exported the string matchers into namespace Catch (a using-directive); v3 keeps them in
// Catch::Matchers and renamed Contains to ContainsSubstring.
inline auto Contains(const std::string& needle,
                     CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(needle, sensitivity);
}
inline auto StartsWith(const std::string& prefix,
                       CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::StartsWith(prefix, sensitivity);
}
// v2's base class for listeners.
using TestEventListenerBase = EventListenerBase;
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#define HLP_CATCH_VERSION_MAJOR 2
#endif
