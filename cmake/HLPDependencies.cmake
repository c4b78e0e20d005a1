# Finds every dependency once and exposes it as an hlp::* interface target.
# Missing packages fail with a message naming the Debian package (`make deps` installs them).

# --- LibTorch ---
# Any LibTorch, found through -DTorch_DIR=<dir with TorchConfig.cmake> or CMAKE_PREFIX_PATH:
#   Debian's libtorch-dev 1.13 (CPU): found with no hints (through its Caffe2 config);
#   a LibTorch 2.x zip:       -DTorch_DIR=/path/to/libtorch/share/cmake/Torch;
#   PyTorch's pip wheel:      -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
#                             (or -DTorch_DIR=<that>/Torch). A CUDA wheel needs the CUDA toolkit
#                             (nvcc) of its CUDA major version for its Caffe2 config.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "LibTorch not found. On Debian: `make deps` (libtorch-dev). "
                      "Elsewhere: -DTorch_DIR=/path/to/libtorch/share/cmake/Torch, or for PyTorch's "
                      "own: -DCMAKE_PREFIX_PATH=\"$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\"")
endif()
add_library(hlp_torch INTERFACE)
add_library(hlp::torch ALIAS hlp_torch)
target_link_libraries(hlp_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(hlp_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_hlp_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(hlp_torch INTERFACE ${_hlp_torch_flags})
# LibTorch 2.x needs C++17 (the project default); its headers from 2.12 on require C++20.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.12)
  set(CMAKE_CXX_STANDARD 20)
endif()
# libstdc++ dual ABI: HLP passes std::string across Boost.PO, SentencePiece, ICU and LibTorch.
# The first three come from the system (C++11 ABI on every current distribution); a LibTorch
# built with the old ABI (_GLIBCXX_USE_CXX11_ABI=0: PyTorch pip wheels before 2.7, the
# "pre-cxx11" LibTorch zips) links only into undefined references. Say so at configure time.
set(HLP_TORCH_CXX11_ABI "")
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
  set(HLP_TORCH_CXX11_ABI "${CMAKE_MATCH_1}")
endif()
# A LibTorch inside a Python package: ask the package too (torch._C._GLIBCXX_USE_CXX11_ABI).
get_filename_component(_hlp_torch_pkg "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
if(EXISTS "${_hlp_torch_pkg}/__init__.py")
  get_filename_component(_hlp_site "${_hlp_torch_pkg}" DIRECTORY)
  find_program(HLP_TORCH_PYTHON NAMES python3 python)
  if(HLP_TORCH_PYTHON)
    execute_process(
      COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${_hlp_site}"
              "${HLP_TORCH_PYTHON}" -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
      OUTPUT_VARIABLE _hlp_py_abi OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _hlp_py_rc)
    if(_hlp_py_rc EQUAL 0 AND _hlp_py_abi MATCHES "^[01]$")
      if(NOT HLP_TORCH_CXX11_ABI STREQUAL "" AND NOT HLP_TORCH_CXX11_ABI STREQUAL _hlp_py_abi)
        message(FATAL_ERROR "LibTorch ABI mismatch: TorchConfig.cmake at ${Torch_DIR} says "
                "_GLIBCXX_USE_CXX11_ABI=${HLP_TORCH_CXX11_ABI} but the Python package at "
                "${_hlp_torch_pkg} says torch._C._GLIBCXX_USE_CXX11_ABI=${_hlp_py_abi}: "
                "Torch_DIR and the PyTorch installation are not the same build.")
      endif()
      set(HLP_TORCH_CXX11_ABI "${_hlp_py_abi}")
    endif()
  endif()
endif()
if(HLP_TORCH_CXX11_ABI STREQUAL "0")
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} uses the old libstdc++ "
          "ABI (_GLIBCXX_USE_CXX11_ABI=0, torch._C._GLIBCXX_USE_CXX11_ABI=False), but HLP's "
          "Boost.Program_options, SentencePiece and ICU use the C++11 ABI: the link would fail "
          "with undefined std::__cxx11 symbols. Use a C++11-ABI LibTorch: PyTorch >= 2.7 from pip, "
          "or a 'libtorch-cxx11-abi-shared-with-deps' zip (-DTorch_DIR=<it>/share/cmake/Torch).")
endif()
set(HLP_TORCH_HAS_CUDA OFF)
if(TORCH_CUDA_LIBRARIES)
  set(HLP_TORCH_HAS_CUDA ON)
endif()
message(STATUS "HLP: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}), CUDA LibTorch: "
               "${HLP_TORCH_HAS_CUDA}, C++11 ABI: ${HLP_TORCH_CXX11_ABI}, C++${CMAKE_CXX_STANDARD}")

# --- MPI: MPICH (default) or Open MPI, one per build directory (-DHLP_MPI=mpich|openmpi) ---
# Debian installs both side by side and points the plain names (mpicc, mpicxx, mpiexec, h5pcc,
# the mpi.h include directory) at the one of higher alternatives priority: Open MPI (50) over MPICH
# (40) as soon as libopenmpi-dev is installed. So each flavour is pinned by its own suffixed
# programs where they exist (mpicxx.mpich, mpiexec.mpich, h5pcc.mpich / the .openmpi ones) and
# by the hdf5/<flavour> directories, whatever the alternatives say. Elsewhere (a cluster's
# modules) the plain names on PATH are used, and the library, the launcher and HDF5 found must
# name the chosen flavour.
set(HLP_MPI "mpich" CACHE STRING "MPI implementation: mpich or openmpi")
set_property(CACHE HLP_MPI PROPERTY STRINGS mpich openmpi)
if(NOT HLP_MPI MATCHES "^(mpich|openmpi)$")
  message(FATAL_ERROR "HLP_MPI=${HLP_MPI}: must be mpich or openmpi")
endif()
if(DEFINED HLP_MPI_CONFIGURED AND NOT HLP_MPI_CONFIGURED STREQUAL HLP_MPI)
  message(FATAL_ERROR "This build directory was configured with HLP_MPI=${HLP_MPI_CONFIGURED}; "
                      "configure HLP_MPI=${HLP_MPI} in a fresh build directory.")
endif()
set(HLP_MPI_CONFIGURED "${HLP_MPI}" CACHE INTERNAL "HLP_MPI of the first configure")
if(HLP_MPI STREQUAL "openmpi")
  set(_hlp_mpi_name "Open MPI")
  set(_hlp_mpi_packages "openmpi-bin libopenmpi-dev libhdf5-openmpi-dev")
  # Open MPI's deprecated C++ bindings (mpicxx.h, -lmpi_cxx): HLP uses the C API only.
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "")
else()
  set(_hlp_mpi_name "MPICH")
  set(_hlp_mpi_packages "mpich libmpich-dev libhdf5-mpich-dev")
endif()
find_program(HLP_MPICC_${HLP_MPI} NAMES mpicc.${HLP_MPI})
find_program(HLP_MPICXX_${HLP_MPI} NAMES mpicxx.${HLP_MPI})
find_program(HLP_MPIEXEC_${HLP_MPI} NAMES mpiexec.${HLP_MPI})
find_program(HLP_H5PCC_${HLP_MPI} NAMES h5pcc.${HLP_MPI})
if(HLP_MPICC_${HLP_MPI} AND HLP_MPICXX_${HLP_MPI} AND HLP_MPIEXEC_${HLP_MPI})
  # Only where not given on the command line (-DMPI_CXX_COMPILER=... wins).
  set(MPI_C_COMPILER "${HLP_MPICC_${HLP_MPI}}" CACHE FILEPATH "")
  set(MPI_CXX_COMPILER "${HLP_MPICXX_${HLP_MPI}}" CACHE FILEPATH "")
  set(MPIEXEC_EXECUTABLE "${HLP_MPIEXEC_${HLP_MPI}}" CACHE FILEPATH "")
endif()
find_package(MPI REQUIRED COMPONENTS C CXX)
# The headers really are the chosen MPI's: Open MPI's mpi.h defines OMPI_MAJOR_VERSION, MPICH's
# (and its derivatives') MPICH_VERSION.
include(CheckSymbolExists)
if(HLP_MPI STREQUAL "openmpi")
  set(_hlp_mpi_macro OMPI_MAJOR_VERSION)
else()
  set(_hlp_mpi_macro MPICH_VERSION)
endif()
set(CMAKE_REQUIRED_INCLUDES ${MPI_C_INCLUDE_DIRS})
check_symbol_exists(${_hlp_mpi_macro} "mpi.h" HLP_MPI_H_IS_${HLP_MPI})
unset(CMAKE_REQUIRED_INCLUDES)
if(NOT HLP_MPI_H_IS_${HLP_MPI})
  message(FATAL_ERROR "HLP_MPI=${HLP_MPI} but the mpi.h found (${MPI_C_INCLUDE_DIRS}, through "
          "${MPI_C_COMPILER}) does not define ${_hlp_mpi_macro}: it is not ${_hlp_mpi_name}'s. Point "
          "-DMPI_C_COMPILER / -DMPI_CXX_COMPILER / -DMPIEXEC_EXECUTABLE at ${_hlp_mpi_name}'s "
          "(Debian: ${_hlp_mpi_packages}).")
endif()
# ... and so is the launcher: Open MPI's mpiexec says "Open MPI" / "OpenRTE", MPICH's "HYDRA".
execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _hlp_mpiexec_version
                ERROR_VARIABLE _hlp_mpiexec_version RESULT_VARIABLE _hlp_rc)
if(HLP_MPI STREQUAL "openmpi")
  set(_hlp_mpiexec_says "Open MPI|OpenRTE")
else()
  set(_hlp_mpiexec_says "HYDRA")
endif()
if(NOT _hlp_mpiexec_version MATCHES "${_hlp_mpiexec_says}")
  message(FATAL_ERROR "HLP_MPI=${HLP_MPI} but ${MPIEXEC_EXECUTABLE} --version does not name "
          "${_hlp_mpi_name}'s launcher; set -DMPIEXEC_EXECUTABLE=<its mpiexec>.")
endif()
add_library(hlp_mpi INTERFACE)
add_library(hlp::mpi ALIAS hlp_mpi)
target_link_libraries(hlp_mpi INTERFACE MPI::MPI_CXX MPI::MPI_C)

# The launcher every test, `make run` / `make bench` and hlp-sweep --run-local use:
# ${CMAKE_BINARY_DIR}/hlp-mpiexec, which runs MPIEXEC_EXECUTABLE with the flags this MPI needs
# here, then HLP_MPIEXEC_PREFLAGS (yours), before the caller's arguments (`hlp-mpiexec -n N prog`).
# Open MPI's mpiexec refuses more ranks than cores (tests run 4 ranks on 2 cores) without
# --oversubscribe and root without --allow-run-as-root (the local Slurm tests need root); and
# when a rank exits non-zero it prints two banners of its own to stderr ("Primary job terminated
# normally, but 1 process returned a non-zero exit code", "mpiexec detected that one or more
# processes exited with non-zero status"), which --quiet leaves out, so that a failing hlp-train
# says what went wrong in its one line as under MPICH (tests/train/measurement_truth.sh,
# tests/cli/*.sh). The ranks' own output and the exit status are unchanged. MPICH needs none.
set(_hlp_preflags "")
if(HLP_MPI STREQUAL "openmpi")
  set(_hlp_preflags --oversubscribe --quiet)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _hlp_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_hlp_uid STREQUAL "0")
    list(APPEND _hlp_preflags --allow-run-as-root)
  endif()
endif()
set(HLP_MPIEXEC_PREFLAGS "" CACHE STRING
    "more flags hlp-mpiexec passes to MPIEXEC_EXECUTABLE before -n (a ;-list)")
list(APPEND _hlp_preflags ${HLP_MPIEXEC_PREFLAGS})
string(REPLACE ";" " " _hlp_preflags_text "${_hlp_preflags}")
set(HLP_MPIEXEC "${CMAKE_BINARY_DIR}/hlp-mpiexec")
file(WRITE "${CMAKE_BINARY_DIR}/CMakeFiles/hlp-mpiexec"
     "#!/bin/sh\n# Generated by cmake/HLPDependencies.cmake (HLP_MPI=${HLP_MPI}).\n"
     "exec '${MPIEXEC_EXECUTABLE}' ${_hlp_preflags_text} \"$@\"\n")
file(COPY "${CMAKE_BINARY_DIR}/CMakeFiles/hlp-mpiexec" DESTINATION "${CMAKE_BINARY_DIR}"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# srun's PMI plugin for this MPI on the local Slurm (slurm/local-cluster.sh): MPICH takes PMI-2;
# Debian's Open MPI 4.1 has no PMI-1/2 client (ompi_info: pmix ext3x only) and needs PMIx.
if(HLP_MPI STREQUAL "openmpi")
  set(HLP_SRUN_MPI "pmix")
else()
  set(HLP_SRUN_MPI "pmi2")
endif()
message(STATUS "HLP: MPI ${HLP_MPI} (${MPI_C_COMPILER}), "
               "launcher ${HLP_MPIEXEC} = ${MPIEXEC_EXECUTABLE} ${_hlp_preflags_text}, srun --mpi=${HLP_SRUN_MPI}")

# --- parallel HDF5 (serial HDF5 cannot write one file from many ranks), of the same MPI ---
set(HDF5_PREFER_PARALLEL ON)
if(HLP_H5PCC_${HLP_MPI})
  set(HDF5_C_COMPILER_EXECUTABLE "${HLP_H5PCC_${HLP_MPI}}" CACHE FILEPATH "")
endif()
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "HDF5 found (${HDF5_C_INCLUDE_DIRS}) is serial; HLP needs parallel HDF5 "
                      "built against ${_hlp_mpi_name} (Debian: ${_hlp_mpi_packages}; `make deps`).")
endif()
# Debian keeps each flavour's HDF5 in hdf5/mpich or hdf5/openmpi: it must be this build's MPI.
if("${HDF5_C_INCLUDE_DIRS};${HDF5_C_LIBRARIES}" MATCHES "/hdf5/(mpich|openmpi)[/;]")
  if(NOT CMAKE_MATCH_1 STREQUAL HLP_MPI)
    message(FATAL_ERROR "HLP_MPI=${HLP_MPI} but HDF5 found is ${CMAKE_MATCH_1}'s "
            "(${HDF5_C_INCLUDE_DIRS}); set -DHDF5_C_COMPILER_EXECUTABLE=<h5pcc of ${_hlp_mpi_name}>.")
  endif()
endif()
add_library(hlp_hdf5 INTERFACE)
add_library(hlp::hdf5 ALIAS hlp_hdf5)
target_include_directories(hlp_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(hlp_hdf5 INTERFACE ${HDF5_C_LIBRARIES} hlp::mpi)
# Only HDF5's own definitions (H5_*) reach HLP's sources. HDF5 2.x's CMake package (Debian sid:
# HDF5_C_LIBRARIES is its imported target hdf5-shared) also exports the feature-test macros HDF5
# itself was compiled with (_GNU_SOURCE, _POSIX_C_SOURCE=200809L, _LARGEFILE_SOURCE,
# _FILE_OFFSET_BITS=64). g++ defines _GNU_SOURCE for C++ anyway, which implies the others'
# effects, and on a 64-bit target off_t is 64-bit already: they change nothing in HDF5's
# headers, but a TU that gets them cannot use the LibTorch PCH (-Winvalid-pch: "not used because
# '_FILE_OFFSET_BITS' is defined") and compiles <torch/torch.h> from scratch. On a 32-bit target
# _FILE_OFFSET_BITS does change off_t and is kept.
if(CMAKE_SIZEOF_VOID_P EQUAL 8)
  set(_hlp_h5_keep "^(-D)?H5_")
else()
  set(_hlp_h5_keep "^(-D)?(H5_|_FILE_OFFSET_BITS)")
endif()
set(_hlp_hdf5_definitions ${HDF5_C_DEFINITIONS})
list(FILTER _hlp_hdf5_definitions INCLUDE REGEX "${_hlp_h5_keep}")
foreach(_hlp_h5_lib IN LISTS HDF5_C_LIBRARIES)
  if(TARGET ${_hlp_h5_lib})
    get_target_property(_hlp_h5_defs ${_hlp_h5_lib} INTERFACE_COMPILE_DEFINITIONS)
    if(_hlp_h5_defs)
      list(FILTER _hlp_h5_defs INCLUDE REGEX "${_hlp_h5_keep}")
      set_property(TARGET ${_hlp_h5_lib} PROPERTY INTERFACE_COMPILE_DEFINITIONS "${_hlp_h5_defs}")
    endif()
  endif()
endforeach()
target_compile_definitions(hlp_hdf5 INTERFACE ${_hlp_hdf5_definitions})

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

# --- Catch2 v2 (Debian 12) or v3 (Debian 13, conda-forge); tests include tests/catch_compat.h ---
if(HLP_BUILD_TESTS)
  find_package(Catch2 QUIET)
  if(NOT Catch2_FOUND OR Catch2_VERSION VERSION_LESS 2.13)
    message(FATAL_ERROR "Catch2 2.13+ or 3.x not found. On Debian: `make deps` (catch2).")
  endif()
  message(STATUS "HLP: Catch2 ${Catch2_VERSION}")
endif()

# --- Optional CUDA / NCCL path ---
set(HLP_HAVE_CUDA OFF)
if(NOT HLP_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  # NCCL: the toolkit's, $NCCL_HOME, or the nvidia-nccl-cu* wheel beside a pip PyTorch
  # (site-packages/nvidia/nccl, which ships libnccl.so.2 without the libnccl.so link).
  get_filename_component(_hlp_nccl_wheel "${TORCH_INSTALL_PREFIX}/../nvidia/nccl" ABSOLUTE)
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS $ENV{NCCL_HOME}/include ${CUDAToolkit_INCLUDE_DIRS} "${_hlp_nccl_wheel}/include")
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS $ENV{NCCL_HOME}/lib ${CUDAToolkit_LIBRARY_DIR} "${_hlp_nccl_wheel}/lib")
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
