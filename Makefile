# HLP front door. CMake is the truth; these targets install, build, test, run and benchmark.
#   make run    install deps, build, run the local sweep (jobs/local.ini) -> results/ -> report/
#   make test   install deps, build, run the whole ctest suite (unit + MPI + end-to-end) with MPICH
#   make test-openmpi   the same with Open MPI (HLP_MPI=openmpi: its packages, build-openmpi/)
#   make deps   apt-get install every Debian package HLP needs (only what is missing)
#   make test-debian13 / test-debian13-cuda   the suite on Debian 13 / LibTorch 2.6 (CPU / CUDA)
#   make test-sid   the suite on Debian sid / LibTorch 2.14 (CPU); these three: tools/debian-root.sh
#   make bench  build and run the benchmarks (communication, data, model, strategies)
#   make sanitize / sanitize-thread   ASan+UBSan (whole suite) / TSan (threaded modules); not in `make test`
#   make fuzz   libFuzzer on every parser of downloaded files (FUZZ_SECONDS each); not in `make test`
SHELL := /bin/bash
# The MPI of the build (cmake -DHLP_MPI): mpich (default) or openmpi, each in its own build
# directory. Both may be installed at once: the build pins its own (cmake/HLPDependencies.cmake),
# whatever Debian's mpi/mpirun alternatives point at.
HLP_MPI ?= mpich
ifeq ($(HLP_MPI),openmpi)
BUILD_DIR ?= build-openmpi
else
BUILD_DIR ?= build
endif
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
# The build's launcher: its MPI's mpiexec with the flags it needs (Open MPI: --oversubscribe,
# --allow-run-as-root for root), written by cmake.
HLP_MPIEXEC ?= $(BUILD_DIR)/hlp-mpiexec

# The MPI and its parallel HDF5, per HLP_MPI.
DEB_MPI_mpich := mpich libmpich-dev libhdf5-mpich-dev
DEB_MPI_openmpi := openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
ifeq ($(DEB_MPI_$(HLP_MPI)),)
$(error HLP_MPI=$(HLP_MPI): must be mpich or openmpi)
endif
# Every Debian package the project needs. libopenblas0-pthread is not optional: without it
# Debian's libtorch runs every matmul on reference BLAS (~18x slower).
DEB_PACKAGES := build-essential cmake make pkg-config git ccache \
  libtorch-dev libopenblas0-pthread python3-torch \
  $(DEB_MPI_$(HLP_MPI)) hdf5-tools python3-h5py python3-pandas \
  libboost-program-options-dev catch2 nlohmann-json3-dev \
  libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev gnuplot-nox \
  slurm-wlm munge procps

# ccache with the shared LibTorch precompiled header
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE := 5G
# relative paths in the cache key: a fresh clone elsewhere reuses what an earlier build compiled
export CCACHE_BASEDIR := $(CURDIR)

.PHONY: all deps build build-run test test-openmpi run bench clean torch2-check gpu-bundle gpu-check \
  test-debian13 test-debian13-cuda test-sid sanitize sanitize-thread fuzz

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "[deps] all $(words $(DEB_PACKAGES)) Debian packages present"; \
	else \
	  echo "[deps] installing:" $$missing; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing \
	    || { echo "[deps] apt-get install failed; install these by hand:" $$missing >&2; exit 1; }; \
	fi

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DHLP_MPI=$(HLP_MPI) $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# What `make run` executes and nothing more: no test or benchmark target is compiled.
RUN_TARGETS := hlp-train hlp-analyze hlp-sweep
build-run: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(RUN_TARGETS)

test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1 $(CTEST_FLAGS)

# The whole suite with Open MPI (Debian 12: 4.1 + libhdf5-openmpi-dev) in build-openmpi/.
test-openmpi:
	$(MAKE) test HLP_MPI=openmpi

# The local sweep: every configuration of jobs/local.ini through mpiexec on this machine, one
# progress line each, then hlp-analyze -> report/index.md. No Slurm needed. --rerun: `make run`
# measures the build it just made, also where an earlier run left complete results.
run: deps
	$(MAKE) build-run
	$(BUILD_DIR)/bin/hlp-sweep jobs/local.ini --site local --out $(BUILD_DIR)/sweeps/local \
	    --results-dir results/local --report-dir report --run-local --rerun
	@echo "[run] results: results/local/*.h5   report: report/index.md"

# Benchmarks print ratios measured in one run (absolute times vary with the machine's load).
bench: export MPIEXEC := $(abspath $(HLP_MPIEXEC))
bench: deps
	$(MAKE) build
	$(HLP_MPIEXEC) -n 2 $(BUILD_DIR)/bin/hlp-bench-comm
	$(BUILD_DIR)/bin/hlp-bench-data
	$(BUILD_DIR)/bin/hlp-bench-model
	OPENBLAS_NUM_THREADS=1 $(BUILD_DIR)/bin/hlp-bench-attention --threads 1 --lengths 1024,2048,4096,8192
	bench/train/run_strategies.sh $(BUILD_DIR) $(BUILD_DIR)/bench-train
	bench/train/run_pipeline.sh $(BUILD_DIR) $(BUILD_DIR)/bench-pipeline 2 4

# Sanitizer builds (README "Sanitizers"), each in its own build directory, with gcc's runtimes
# (libasan8, libubsan1, libtsan2: build-essential brings them):
#   make sanitize                     ASan + UBSan (build/asan): every target, the whole suite but
#                                     the tests in tests/sanitize/asan-exclude.txt
#   make sanitize SANITIZER=thread    TSan (build/tsan): the threaded modules' tests only (labels
#   make sanitize-thread              comm, data, metrics) but tests/sanitize/tsan-exclude.txt
# The *_OPTIONS are exported so that every process inherits them: ranks under mpiexec, binaries
# that test scripts run. Nothing is preloaded, so Python interpreters stay uninstrumented.
# Suppressions name third-party libraries only (tests/sanitize/*.supp).
SANITIZER ?= address,undefined
space := $(subst ,, )
SANITIZE_DIR := $(CURDIR)/tests/sanitize
ifeq ($(SANITIZER),thread)
SANITIZE_BUILD_DIR ?= build/tsan
SANITIZE_MODULES := comm data metrics
# The targets of their test folders, and of src/comm (comm_nccl_probe runs hlp-nccl-probe).
SANITIZE_BUILD = for d in $(addprefix tests/,$(SANITIZE_MODULES)) src/comm; do \
	  $(MAKE) -C $(SANITIZE_BUILD_DIR)/$$d -j $(JOBS) all || exit 1; done
SANITIZE_SELECT := -L '^($(subst $(space),|,$(SANITIZE_MODULES)))$$' \
  -E "$$($(CURDIR)/tools/sanitize-tests.sh $(SANITIZE_DIR)/tsan-exclude.txt)"
sanitize: export TSAN_OPTIONS := halt_on_error=1 second_deadlock_stack=1 \
  suppressions=$(SANITIZE_DIR)/tsan.supp
# MPICH's UCX hooks madvise (libucm); glibc calls it on a thread's stack after TSan has let go of
# the thread, and the hook's rwlock then crashes TSan's interceptor (SIGSEGV in every MPI test).
sanitize: export UCX_MEM_MMAP_HOOK_MODE := none
else
SANITIZE_BUILD_DIR ?= build/asan
SANITIZE_BUILD = cmake --build $(SANITIZE_BUILD_DIR) -j $(JOBS)
SANITIZE_SELECT := -E "$$($(CURDIR)/tools/sanitize-tests.sh $(SANITIZE_DIR)/asan-exclude.txt)"
sanitize: export ASAN_OPTIONS := detect_leaks=1 check_initialization_order=1 strict_init_order=1 \
  detect_stack_use_after_return=1 suppressions=$(SANITIZE_DIR)/asan.supp
sanitize: export LSAN_OPTIONS := suppressions=$(SANITIZE_DIR)/lsan.supp print_suppressions=0
sanitize: export UBSAN_OPTIONS := print_stacktrace=1 halt_on_error=1 \
  suppressions=$(SANITIZE_DIR)/ubsan.supp
endif

sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DHLP_SANITIZE=$(SANITIZER) $(CMAKE_FLAGS)
	$(SANITIZE_BUILD)
	cd $(SANITIZE_BUILD_DIR) && ctest --output-on-failure -j 1 $(SANITIZE_SELECT) $(CTEST_FLAGS)

sanitize-thread:
	$(MAKE) sanitize SANITIZER=thread

# Fuzzing (tests/fuzz/README.md): the parsers of files HLP takes from the internet
# (safetensors, config.json, tokenizer.json, corpus files, INI files, result files) under
# libFuzzer + ASan + UBSan, built with clang in $(FUZZ_BUILD_DIR). Each target runs FUZZ_SECONDS
# on its corpus ($(FUZZ_BUILD_DIR)/corpus/<target>, seeded from tests/fuzz/corpus/) and prints
# executions, exec/s, corpus size and crashes; a crash fails with the input's path.
#   make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS="safetensors hf_config"
# `make test` only replays the seeds and tests/fuzz/regressions/ (ctest fuzz_replay_<target>).
FUZZ_BUILD_DIR ?= build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: DEB_PACKAGES += clang-14 libclang-rt-14-dev
fuzz: deps
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DHLP_FUZZ=ON -DHLP_WITH_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target hlp_fuzzers
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Developer checks of the GPU path (not part of `make test`):
#   torch2-check  every LibTorch translation unit against LibTorch 2.6 + CUDA headers (Debian
#                 trixie's libtorch-cuda-dev, downloaded once: network); syntax only, no GPU
#   gpu-bundle    apt-get download the Debian packages a GPU machine without MPI/HDF5/Boost needs
#   gpu-check     on a GPU machine: build against PyTorch's LibTorch + the bundle, CUDA vs CPU
#                 runs, bf16, memory, report, tokens/s (tools/gpu-check.sh --help)
# Debian roots made with debootstrap under $(BUILD_DIR)/debian-<suite>/<flavour>/ by
# tools/debian-root.sh (root needed; made once, then cached):
#   test-debian13       trixie: LibTorch 2.6 (CPU), g++ 14, Catch2 3: every target, the whole suite
#   test-debian13-cuda  trixie: LibTorch 2.6 CUDA + CUDA 12.4 + NCCL 2.22: every target linked with
#                       HLP_WITH_CUDA=ON, ldd record, the whole suite on this GPU-less machine
#   test-sid            sid: LibTorch 2.14 (CPU, C++20), g++ 16, HDF5 2.2, MPICH 5: every target,
#                       the whole suite (the root also holds Python's torch 2.14 + transformers 5)
test-debian13: DEBIAN_ROOT := trixie cpu
test-debian13-cuda: DEBIAN_ROOT := trixie cuda
test-sid: DEBIAN_ROOT := sid cpu
test-debian13 test-debian13-cuda test-sid:
	@command -v debootstrap >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -qq --no-install-recommends debootstrap; }
	$$([ "$$(id -u)" -eq 0 ] || echo sudo) env BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) \
	  tools/debian-root.sh $(DEBIAN_ROOT) -- $(CTEST_FLAGS)

torch2-check:
	@test -f $(BUILD_DIR)/compile_commands.json || cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	JOBS=$(JOBS) tools/torch2-compile-check.sh $(BUILD_DIR)

gpu-bundle:
	tools/gpu-bundle.sh

gpu-check:
	tools/gpu-check.sh $(GPU_CHECK_FLAGS)

clean:
	rm -rf $(BUILD_DIR)
