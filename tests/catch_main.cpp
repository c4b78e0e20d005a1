// main() of every single-process Catch2 test executable (v2 and v3 alike).
#define CATCH_CONFIG_RUNNER
#include "catch_compat.h"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
