#include "comm/dtype.h"

#include <stdexcept>
#include <string>

namespace hlp::comm {
namespace {

const DtypeInfo kDtypes[] = {
    {c10::ScalarType::Float, "float32", 4, c10::ScalarType::Float},
    {c10::ScalarType::Double, "float64", 8, c10::ScalarType::Double},
    {c10::ScalarType::Long, "int64", 8, c10::ScalarType::Long},
    {c10::ScalarType::BFloat16, "bfloat16", 2, c10::ScalarType::Float},
    {c10::ScalarType::Half, "float16", 2, c10::ScalarType::Float},
};

}  // namespace

bool is_supported_dtype(c10::ScalarType type) {
  for (const DtypeInfo& info : kDtypes)
    if (info.type == type) return true;
  return false;
}

const DtypeInfo& dtype_info(c10::ScalarType type) {
  for (const DtypeInfo& info : kDtypes)
    if (info.type == type) return info;
  throw std::invalid_argument(std::string("communicator: unsupported tensor dtype ") +
                              c10::toString(type) +
                              "; supported: float32, bfloat16, float16, float64, int64");
}

}  // namespace hlp::comm
