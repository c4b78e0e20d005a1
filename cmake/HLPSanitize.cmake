# Sanitizer builds (`make sanitize`, `make sanitize-thread`; README "Sanitizers").
#   -DHLP_SANITIZE=address,undefined   ASan + UBSan (build/asan)
#   -DHLP_SANITIZE=thread              TSan (build/tsan)
# Every target of the project, the shared <torch/torch.h> precompiled header included, gets the
# same flags: they are directory-wide options set before any target exists. Third-party
# libraries (LibTorch, MPICH, HDF5, OpenBLAS) stay uninstrumented.
set(HLP_SANITIZE "" CACHE STRING "Sanitizers to build with (gcc -fsanitize=...): address,undefined | thread | empty")

if(HLP_SANITIZE)
  if(HLP_SANITIZE MATCHES "thread" AND HLP_SANITIZE MATCHES "address")
    message(FATAL_ERROR "HLP_SANITIZE=${HLP_SANITIZE}: TSan cannot be combined with ASan")
  endif()
  # -O1 -g, asserts on: line numbers in reports, and fast enough for the whole suite.
  foreach(lang C CXX)
    set(CMAKE_${lang}_FLAGS_RELEASE "-O1 -g")
    set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "-O1 -g")
  endforeach()
  set(_hlp_san_flags "-fsanitize=${HLP_SANITIZE}" -fno-omit-frame-pointer)
  if(HLP_SANITIZE MATCHES "undefined")
    # A UBSan finding aborts the process, so the test that hit it fails.
    list(APPEND _hlp_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_hlp_san_flags})
  add_link_options("-fsanitize=${HLP_SANITIZE}")
  message(STATUS "HLP: sanitizers ${HLP_SANITIZE}")
endif()
