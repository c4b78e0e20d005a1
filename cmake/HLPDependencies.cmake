# Finds every dependency once and exposes it as an hlp::* interface target.
# Missing packages fail with a message naming the Debian package (`make deps` installs them).

# --- LibTorch (Debian libtorch-dev here; a CUDA LibTorch via -DTorch_DIR=... on a cluster) ---
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "LibTorch not found. On Debian: `make deps` (libtorch-dev). "
                      "Elsewhere: -DTorch_DIR=/path/to/libtorch/share/cmake/Torch")
endif()
add_library(hlp_torch INTERFACE)
add_library(hlp::torch ALIAS hlp_torch)
target_link_libraries(hlp_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(hlp_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_hlp_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(hlp_torch INTERFACE ${_hlp_torch_flags})
message(STATUS "HLP: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX})")

# --- MPI (MPICH) ---
find_package(MPI REQUIRED COMPONENTS C CXX)
add_library(hlp_mpi INTERFACE)
add_library(hlp::mpi ALIAS hlp_mpi)
target_link_libraries(hlp_mpi INTERFACE MPI::MPI_CXX MPI::MPI_C)
set(HLP_MPIEXEC "${MPIEXEC_EXECUTABLE}" CACHE FILEPATH "mpiexec used by ctest")

# --- parallel HDF5 (serial HDF5 cannot write one file from many ranks) ---
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "HDF5 found (${HDF5_C_INCLUDE_DIRS}) is serial; HLP needs parallel HDF5 "
                      "built against MPICH (Debian: libhdf5-mpich-dev; `make deps`).")
endif()
add_library(hlp_hdf5 INTERFACE)
add_library(hlp::hdf5 ALIAS hlp_hdf5)
target_include_directories(hlp_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(hlp_hdf5 INTERFACE ${HDF5_C_LIBRARIES} hlp::mpi)
target_compile_definitions(hlp_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

# --- Boost.Program_options, nlohmann_json, SentencePiece ---
find_package(Boost 1.70 REQUIRED COMPONENTS program_options)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_library(hlp_sentencepiece INTERFACE)
add_library(hlp::sentencepiece ALIAS hlp_sentencepiece)
target_link_libraries(hlp_sentencepiece INTERFACE PkgConfig::SENTENCEPIECE)

# --- PCRE2 and ICU: the regex pre-tokenizer and NFC of Hugging Face tokenizer.json (BPE) ---
pkg_check_modules(PCRE2 IMPORTED_TARGET libpcre2-8)
if(NOT PCRE2_FOUND)
  message(FATAL_ERROR "PCRE2 not found (pkg-config libpcre2-8). On Debian: `make deps` (libpcre2-dev).")
endif()
find_package(ICU COMPONENTS uc i18n)
if(NOT ICU_FOUND)
  message(FATAL_ERROR "ICU not found. On Debian: `make deps` (libicu-dev).")
endif()
add_library(hlp_unicode INTERFACE)
add_library(hlp::unicode ALIAS hlp_unicode)
target_link_libraries(hlp_unicode INTERFACE PkgConfig::PCRE2 ICU::uc ICU::i18n)

# --- Catch2 v2 ---
if(HLP_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# --- Optional CUDA / NCCL path ---
set(HLP_HAVE_CUDA OFF)
if(NOT HLP_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(HLP_HAVE_CUDA ON)
    add_library(hlp_nccl INTERFACE)
    add_library(hlp::nccl ALIAS hlp_nccl)
    target_include_directories(hlp_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(hlp_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    message(STATUS "HLP: CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_LIBRARY}: NCCL backend will be built")
  elseif(HLP_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HLP_WITH_CUDA=ON but the CUDA toolkit or NCCL was not found "
                        "(CUDAToolkit_ROOT / NCCL_HOME)")
  else()
    message(STATUS "HLP: CUDA/NCCL not found; building the CPU (MPI) path only")
  endif()
endif()

# --- common compile settings for our own targets ---
add_library(hlp_common INTERFACE)
add_library(hlp::common ALIAS hlp_common)
target_include_directories(hlp_common INTERFACE
  "${CMAKE_SOURCE_DIR}/src" "${CMAKE_BINARY_DIR}/generated")
target_compile_options(hlp_common INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(HLP_HAVE_CUDA)
  target_compile_definitions(hlp_common INTERFACE HLP_HAVE_CUDA=1)
endif()

# --- one precompiled <torch/torch.h> shared by every LibTorch-heavy target (~19 s a TU without) ---
add_library(hlp_torch_pch OBJECT "${CMAKE_SOURCE_DIR}/src/common/torch_pch.cpp")
target_link_libraries(hlp_torch_pch PUBLIC hlp::torch hlp::common)
target_precompile_headers(hlp_torch_pch PRIVATE <torch/torch.h>)
set_target_properties(hlp_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
function(hlp_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM hlp_torch_pch)
endfunction()
