# HLP front door. CMake is the truth; these targets install, build, test, run and benchmark.
#   make run    install deps, build, run the local sweep (jobs/local.ini) -> results/ -> report/
#   make test   install deps, build, run the whole ctest suite (unit + MPI + end-to-end)
#   make deps   apt-get install every Debian package HLP needs (only what is missing)
#   make test-debian13 / test-debian13-cuda   the suite on Debian 13 / LibTorch 2.6 (CPU / CUDA)
#   make bench  build and run the benchmarks (communication, data, model, strategies)
SHELL := /bin/bash
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
HLP_MPIEXEC ?= mpiexec

# Every Debian package the project needs. libopenblas0-pthread is not optional: without it
# Debian's libtorch runs every matmul on reference BLAS (~18x slower).
DEB_PACKAGES := build-essential cmake make pkg-config git ccache \
  libtorch-dev libopenblas0-pthread python3-torch \
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools python3-h5py \
  libboost-program-options-dev catch2 nlohmann-json3-dev \
  libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev gnuplot-nox \
  slurm-wlm munge procps

# ccache with the shared LibTorch precompiled header
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE := 5G
# relative paths in the cache key: a fresh clone elsewhere reuses what an earlier build compiled
export CCACHE_BASEDIR := $(CURDIR)

.PHONY: all deps build build-run test run bench clean torch2-check gpu-bundle gpu-check \
  test-debian13 test-debian13-cuda

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
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# What `make run` executes and nothing more: no test or benchmark target is compiled.
RUN_TARGETS := hlp-train hlp-analyze hlp-sweep
build-run: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(RUN_TARGETS)

test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 1 $(CTEST_FLAGS)

# The local sweep: every configuration of jobs/local.ini through mpiexec on this machine, one
# progress line each, then hlp-analyze -> report/index.md. No Slurm needed.
run: deps
	$(MAKE) build-run
	$(BUILD_DIR)/bin/hlp-sweep jobs/local.ini --site local --out $(BUILD_DIR)/sweeps/local \
	    --results-dir results/local --report-dir report --run-local
	@echo "[run] results: results/local/*.h5   report: report/index.md"

# Benchmarks print ratios measured in one run (absolute times vary with the machine's load).
bench: deps
	$(MAKE) build
	$(HLP_MPIEXEC) -n 2 $(BUILD_DIR)/bin/hlp-bench-comm
	$(BUILD_DIR)/bin/hlp-bench-data
	$(BUILD_DIR)/bin/hlp-bench-model
	OPENBLAS_NUM_THREADS=1 $(BUILD_DIR)/bin/hlp-bench-attention --threads 1 --lengths 1024,2048,4096,8192
	bench/train/run_strategies.sh $(BUILD_DIR) $(BUILD_DIR)/bench-train
	bench/train/run_pipeline.sh $(BUILD_DIR) $(BUILD_DIR)/bench-pipeline 2 4

# Developer checks of the GPU path (not part of `make test`):
#   torch2-check  every LibTorch translation unit against LibTorch 2.6 + CUDA headers (Debian
#                 trixie's libtorch-cuda-dev, downloaded once: network); syntax only, no GPU
#   gpu-bundle    apt-get download the Debian packages a GPU machine without MPI/HDF5/Boost needs
#   gpu-check     on a GPU machine: build against PyTorch's LibTorch + the bundle, CUDA vs CPU
#                 runs, bf16, memory, report, tokens/s (tools/gpu-check.sh --help)
# Debian 13 (trixie) roots made with debootstrap under $(BUILD_DIR)/debian13/ (root needed):
#   test-debian13       LibTorch 2.6 (CPU), g++ 14, Catch2 3: every target, the whole suite
#   test-debian13-cuda  LibTorch 2.6 CUDA + CUDA 12.4 + NCCL 2.22: every target linked with
#                       HLP_WITH_CUDA=ON, ldd record, the whole suite on this GPU-less machine
test-debian13: DEBIAN13_FLAVOUR := cpu
test-debian13-cuda: DEBIAN13_FLAVOUR := cuda
test-debian13 test-debian13-cuda:
	@command -v debootstrap >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -qq --no-install-recommends debootstrap; }
	$$([ "$$(id -u)" -eq 0 ] || echo sudo) env BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) \
	  tools/debian13.sh $(DEBIAN13_FLAVOUR) -- $(CTEST_FLAGS)

torch2-check:
	@test -f $(BUILD_DIR)/compile_commands.json || cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	JOBS=$(JOBS) tools/torch2-compile-check.sh $(BUILD_DIR)

gpu-bundle:
	tools/gpu-bundle.sh

gpu-check:
	tools/gpu-check.sh $(GPU_CHECK_FLAGS)

clean:
	rm -rf $(BUILD_DIR)
