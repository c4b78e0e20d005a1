#pragma once
// Include this instead of <catch2/catch.hpp> in tests that use ATen. c10's logging header
// defines a glog-style CHECK(cond) macro; included after Catch it silently replaces Catch's
// CHECK (failures then abort instead of being reported, and passes are not counted).
// So: ATen first, drop c10's CHECK, then Catch defines its own.
#include <ATen/ATen.h>
#undef CHECK
#include "catch_compat.h"
