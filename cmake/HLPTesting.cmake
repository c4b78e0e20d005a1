# Test helpers shared by every tests/<module>/CMakeLists.txt.
include(Catch)

# Sample data and tools that tests find through environment variables.
set(HLP_TEST_ENV
  "HLP_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
  "HLP_BIN_DIR=${HLP_BIN_DIR}"
  "HLP_MPIEXEC=${HLP_MPIEXEC}"
  "HLP_MPI=${HLP_MPI}"
  "HLP_SRUN_MPI=${HLP_SRUN_MPI}"
  "HLP_QWEN3_TOKENIZER=${HLP_QWEN3_TOKENIZER}"
  "OMP_NUM_THREADS=1")

# A discovered test whose name filter matches no test case must fail, not pass with "No test
# cases matched" (Catch2 2 exits 0 there). That happened: names with ';' were split by CMake's
# list syntax into two ctest entries that ran nothing. Test case names must not contain ';' or
# '\' (Catch's filter takes a backslash as an escape).
# Catch2 3 fails an unmatched filter by itself (exit 2) and has no NoTests warning.
if(Catch2_VERSION VERSION_LESS 3)
  set(HLP_CATCH_EXTRA_ARGS --warn NoTests)
else()
  set(HLP_CATCH_EXTRA_ARGS "")
endif()

# hlp_add_catch_test(NAME SOURCES a.cpp b.cpp LIBS x y [TORCH])
# A Catch2 executable whose test cases ctest discovers one by one.
function(hlp_add_catch_test name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} "${CMAKE_SOURCE_DIR}/tests/catch_main.cpp")
  target_link_libraries(${name} PRIVATE Catch2::Catch2 hlp::common ${ARG_LIBS})
  if(ARG_TORCH)
    target_link_libraries(${name} PRIVATE hlp::torch)
    hlp_use_torch_pch(${name})
  endif()
  catch_discover_tests(${name} EXTRA_ARGS ${HLP_CATCH_EXTRA_ARGS} PROPERTIES ENVIRONMENT "${HLP_TEST_ENV}")
endfunction()

# hlp_add_mpi_test(NAME NP N COMMAND exe args... [TIMEOUT s])
# Runs COMMAND under `mpiexec -n N` (real ranks, real MPI).
function(hlp_add_mpi_test name)
  # ENV: extra NAME=VALUE entries beside HLP_TEST_ENV (e.g. HLP_TEST_KERNELS=lean)
  cmake_parse_arguments(ARG "" "NP;TIMEOUT" "COMMAND;ENV" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND "${HLP_MPIEXEC}" -n ${ARG_NP} ${ARG_COMMAND})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} PROCESSORS ${ARG_NP}
                       ENVIRONMENT "${HLP_TEST_ENV};${ARG_ENV}" LABELS mpi)
endfunction()
