#pragma once
// One table of names per option enum: the value an option parses into, the text that names it
// on the command line, in INI files and result files, and the list a "choose ..." error or a
// sweep's value check shows. Parsed once where the text enters (the CLI, a file reader); the
// code downstream compares enums, never strings.
//
//   enum class Comm { automatic, nccl, mpi };
//   inline constexpr EnumName<Comm> kCommNames[] = {{Comm::automatic, "auto"}, ...};
//   Comm c = parse_enum("comm", text, kCommNames);   // UserError: --comm: unknown value ...
//   enum_name(c, kCommNames)                          // "auto"
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/printable.h"

namespace hlp {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// "a, b or c": the names of `table` as a sentence.
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string list;
  for (size_t i = 0; i < N; ++i)
    list += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return list;
}

template <typename E, size_t N>
std::vector<std::string> enum_names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.name);
  return names;
}

// The value `text` names; UserError "--option: unknown value 'x'; choose a, b or c" otherwise
// (the text may come from a file: quoted printable()).
template <typename E, size_t N>
E parse_enum(const char* option, const std::string& text, const EnumName<E> (&table)[N]) {
  for (const auto& entry : table)
    if (text == entry.name) return entry.value;
  throw user_error("--", option, ": unknown value '", printable(text), "'; choose ",
                   enum_choices(table));
}

template <typename E, size_t N>
const char* enum_name(E value, const EnumName<E> (&table)[N]) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  throw std::logic_error("enum_name: a value without a name in its table");
}

}  // namespace hlp
