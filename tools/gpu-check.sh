#!/usr/bin/env bash
# The GPU check of HLP (issue #13), for a Linux machine with an NVIDIA GPU, nvcc, CMake and a
# PyTorch installation (LibTorch inside it) but no MPI, HDF5 or Boost and no network.
#
#   here (Debian 12, network):   tools/gpu-bundle.sh            -> build-gpu-bundle/*.deb (~35 MiB)
#   on the GPU machine:          tools/gpu-check.sh             (or: make gpu-check)
#   dry run here (no GPU):       tools/gpu-check.sh --cpu-dry-run
#
# Steps (each one a row of the summary table; exit 1 if any row FAILs):
#   bundle     verify build-gpu-bundle/MANIFEST (sha256), `dpkg -x` every .deb into a private
#              prefix, relocate the wrappers and .pc files (mpicc, h5pcc, pkg-config) to it, and
#              check with ldd that every library in it loads on this machine.
#   configure  HLP against PyTorch's LibTorch (torch.utils.cmake_prefix_path; ABI checked) and the
#              prefix (CMAKE_PREFIX_PATH, MPI and HDF5 wrappers from the prefix, PATH and
#              LD_LIBRARY_PATH), then checks in CMakeCache.txt that MPI, HDF5, Boost, SentencePiece,
#              PCRE2, ICU, Catch2 and nlohmann_json all came from the prefix.
#   build      every target.
#   ctest-cuda every test labelled `cuda` (the NCCL probe and the NCCL comm tests at world size 1,
#              sdpa parity with naive/blocked); then the MPI comm tests with 2 ranks on one GPU
#              (HLP_TEST_DEVICE=cuda: CUDA tensors staged through the host by the MPI backend).
#   parity-*   single (1 rank), ddp / fsdp2 / pp / tp (2 ranks, --comm mpi: NCCL refuses two
#              ranks on one GPU) with --device cuda against the same with --device cpu, fp32,
#              5 steps of `tiny`: every step's loss within 1e-4 relative (read from the HDF5
#              result files with h5py). Plus ddp at 1 rank with --comm nccl. The same for the
#              model families and axes beyond `tiny`: moe-single, moe-ep-ddp and moe-ep-fsdp2
#              (the transformers 5 Qwen3-Next fixture qwen3_next_moe_a: 8 experts, top 2, a
#              shared expert; --ep 2 at 2 ranks, whose all-to-all byte counts must equal the CPU
#              run's and be > 0), cp-chain, cp-allgather and cp-alltoall (tiny, --cp 2 at 2 ranks,
#              each --cp-scheme; alltoall with --cp-attention alltoall; the file's
#              /context_parallel scheme attributes checked), qwen35-single (the Qwen3.5 fixture
#              qwen3_5_text_a). --parity LIST picks the rows (default: all of them).
#   bf16       single --device cuda --precision bf16: 5 finite losses within 5e-2 of fp32's
#              (moe-bf16, qwen35-bf16: the same for the two fixtures).
#   fsdp2-bytes fsdp2's per-rank param / grad / optimizer bytes on CUDA equal those on CPU, which
#              tests/train (train_parity_np2, "held bytes equal the closed form") pins to the
#              closed form.
#   report     hlp-analyze report of all those runs (table only, marked WARN, without gnuplot).
#   perf-*     single and fsdp2 (1 rank, NCCL) tokens/s and peak GiB for jet-nemotron-2b with its
#              real vocabulary (151,936; the shipped Qwen3 tokenizer), LoRA r32 alpha 64 on every
#              projection, bf16, T = 4096, micro-batch 1 (median over the steps after 2 warm-up
#              steps); with --peer-export DIR also the PyTorch peer's step on the same GPU
#              (bench/peer/peer_step.py; DIR from `hlp-export-init --weights no` with the same
#              model, tokenizer and LoRA) and the ratio HLP single / peer. perf-qwen35: a
#              Qwen3.5-9B text model (bench/peer/qwen3_5_9b/config.json: 32 layers GGGA, D 4096,
#              vocabulary 248,320), LoRA r32 alpha 64 on every projection, bf16, T 4096, single;
#              perf-qwen35-peer: transformers' own Qwen3.5 model with PEFT on the same config
#              (bench/peer/hf_peft_step.py; the linear-attention path it took is printed), the
#              parameter counts checked equal and the ratio HLP / transformers + PEFT.
#
# Options: --bundle DIR (default build-gpu-bundle), --build DIR (default build-gpu),
#          --cpu-dry-run (everything with --device cpu, Debian's LibTorch, the bundle's MPI/HDF5
#          instead of the system's, no perf runs: exercises unpack, relocation and configure here),
#          --no-perf, --configure-only (stop after the configure row), --jobs N,
#          --no-bundle (a cluster: MPI, HDF5, Boost, ... from modules / CMAKE_PREFIX_PATH in the
#          environment, mpiexec from PATH; no Debian bundle, no prefix check),
#          --only-build (stop after the build row) and --skip-build (reuse BUILD as it is): the
#          device tool allows 10 minutes a command, so build in one call and check in the next
#          (the machine keeps BUILD while it stays warm); --targets "A B" builds only those
#          (a quicker dry run: hlp-train hlp-analyze hlp_sdpa_test).
#          --peer-export DIR (see perf-*), --run-timeout S (each tiny run, default 120 s) and
#          --perf-timeout S (each perf run, default 240 s): a hung run cannot eat a device call;
#          --deadline S: no run starts after S seconds from the check's start, and none is given
#          longer than what remains (its row says "deadline"), so the summary and the files
#          always come back inside a device call's limit. --perf-only: only the perf rows (no
#          ctest, parity, bf16, report); --perf-runs "single peer fsdp2" (the default) picks them
#          (also: qwen35 qwen35-peer); --perf-args "..." adds hlp-train options to HLP's perf
#          runs (e.g. --activation-checkpointing). --parity "single ddp ..." picks the parity rows (names as
#          above, plus nccl1 and bf16; an unknown name is an error).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$here/build-gpu-bundle"
build="$here/build-gpu"
dry=0 perf=1 configure_only=0 use_bundle=1 only_build=0 skip_build=0 targets="" jobs="$(nproc)"
peer_export="" run_timeout=120 perf_timeout=240 deadline=0 perf_only=0 perf_runs="single peer fsdp2"
perf_args=""
all_parity="single ddp fsdp2 pp tp nccl1 bf16 moe-single moe-ep-ddp moe-ep-fsdp2 moe-bf16 cp-chain cp-allgather cp-alltoall qwen35-single qwen35-bf16"
parity="$all_parity"
started=$(date +%s)
# seconds a run may take now: min(LIMIT, what the deadline leaves); 0 when under 20 s are left
budget() {
  local left
  [ "$deadline" -gt 0 ] || { echo "$1"; return; }
  left=$((deadline - ($(date +%s) - started)))
  [ "$left" -ge 20 ] || { echo 0; return; }
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$(realpath -m "$2")"; shift 2 ;;
    --build) build="$(realpath -m "$2")"; shift 2 ;;
    --cpu-dry-run) dry=1; perf=0; shift ;;
    --no-perf) perf=0; shift ;;
    --configure-only) configure_only=1; shift ;;
    --no-bundle) use_bundle=0; shift ;;
    --only-build) only_build=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --targets) targets="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --peer-export) peer_export="$(realpath -m "$2")"; shift 2 ;;
    --run-timeout) run_timeout="$2"; shift 2 ;;
    --perf-timeout) perf_timeout="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    --perf-only) perf_only=1; shift ;;
    --perf-runs) perf_runs="$2"; shift 2 ;;
    --perf-args) perf_args="$2"; shift 2 ;;
    --parity) parity="$2"; shift 2 ;;
    -h|--help) sed -n '2,71p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
for p in $parity; do
  case " $all_parity " in *" $p "*) ;; *) echo "gpu-check: --parity: unknown row $p (rows: $all_parity)" >&2; exit 2 ;; esac
done
for p in $perf_runs; do
  case " single peer fsdp2 qwen35 qwen35-peer " in *" $p "*) ;; *) echo "gpu-check: --perf-runs: unknown run $p (runs: single peer fsdp2 qwen35 qwen35-peer)" >&2; exit 2 ;; esac
done
picked() { case " $parity " in *" $1 "*) return 0 ;; esac; return 1; }
[ "$dry" = 1 ] && [ "$build" = "$here/build-gpu" ] && build="$here/build-gpu-dry"
prefix="$build/prefix"
runs="$build/gpu-check-runs"
log="$build/gpu-check.log"
rm -rf "$runs"   # this check's runs only: the byte check and the report read what is there
mkdir -p "$build" "$runs"
: >"$log"

rows=()      # "STEP|STATUS|DETAIL"
failed=0
row() {      # row STEP STATUS DETAIL
  rows+=("$1|$2|$3")
  [ "$2" = FAIL ] && failed=1
  printf '[gpu-check] %-20s %-4s %s\n' "$1" "$2" "$3"
}
say() { echo "[gpu-check] $*"; }
summary() {
  echo
  echo "== HLP GPU check summary ($( [ "$dry" = 1 ] && echo "CPU dry run" || echo "GPU" ), $(date -u +%FT%TZ)) =="
  printf '| %-20s | %-6s | %s\n' step status detail
  printf '|%s|%s|%s\n' "----------------------" "--------" "-------------------------------------------"
  for r in "${rows[@]}"; do
    IFS='|' read -r s st d <<<"$r"
    printf '| %-20s | %-6s | %s\n' "$s" "$st" "$d"
  done
  echo "log: $log   runs: $runs"
  [ "$failed" = 0 ] && echo "GPU CHECK: PASS" || echo "GPU CHECK: FAIL"
}
finish() { summary | tee -a "$log"; exit "$failed"; }

# ---------------------------------------------------------------- environment
# dpkg -x where there is dpkg; else the .deb's ar member data.tar.* through tar (same result)
deb_extract() {
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
  local member
  member="$(ar t "$1" | grep '^data\.tar')" || return 1
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
    *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
    *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}
command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"; }
python=""
for p in "${HLP_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$p" ] && "$p" -c 'import h5py' >/dev/null 2>&1 && { python="$p"; break; }
done
[ -n "$python" ] || { row env FAIL "no python3 with h5py (reads the result files); set HLP_PYTHON"; finish; }
if [ "$dry" = 0 ]; then
  gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed -n 1p)"
  [ -n "$gpu" ] || { row env FAIL "nvidia-smi finds no GPU (use --cpu-dry-run on a machine without one)"; finish; }
  torch_py="$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.utils.cmake_prefix_path)' 2>>"$log")" ||
    { row env FAIL "python3 cannot import torch"; finish; }
  read -r torch_version torch_cuda torch_gpu torch_abi torch_prefix <<<"$torch_py"
  [ "$torch_gpu" = True ] || { row env FAIL "torch $torch_version sees no GPU"; finish; }
  nccl_home="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)"
  row env ok "$gpu; torch $torch_version (CUDA $torch_cuda, cxx11 ABI $torch_abi); nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'); cmake $(cmake --version | awk 'NR == 1 {print $3}')"
else
  torch_prefix="/usr/lib/x86_64-linux-gnu/cmake"   # Debian's LibTorch 1.13 (CPU)
  nccl_home=""
  row env ok "CPU dry run: Debian LibTorch, bundle MPI/HDF5/Boost/..., --device cpu; python $python"
fi

# ---------------------------------------------------------------- bundle -> prefix
if [ "$use_bundle" = 1 ]; then
[ -f "$bundle/MANIFEST" ] || { row bundle FAIL "$bundle/MANIFEST missing: run tools/gpu-bundle.sh on a Debian 12 machine and carry $bundle"; finish; }
bad=""
while read -r pkg ver size sha; do
  f="$(ls "$bundle/${pkg}_"*.deb 2>/dev/null | sed -n 1p)"
  [ -n "$f" ] && [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sha" ] || bad="$bad $pkg"
done <"$bundle/MANIFEST"
[ -z "$bad" ] || { row bundle FAIL "missing or corrupt .deb:$bad"; finish; }
stamp="$(cat "$bundle/MANIFEST" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$prefix/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$bundle"/*.deb; do deb_extract "$f" "$prefix" || { row bundle FAIL "unpacking $f"; finish; }; done
  P="$prefix" "$python" - <<'EOF' || { row bundle FAIL "relocating the prefix"; finish; }
# Relocate what names /usr: the MPI and HDF5 compiler wrappers, pkg-config files, HDF5 settings.
import os, re, glob
P = os.environ["P"]
pat = re.compile(r'(^|[=" \'\t:]|-I|-L|-isystem)/usr(?=[/"\' \t\n;]|$)', re.M)
files = glob.glob(P + "/usr/bin/*.mpich") + glob.glob(P + "/usr/bin/mpivars") + \
        glob.glob(P + "/usr/bin/pcre2-config") + glob.glob(P + "/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc") + \
        glob.glob(P + "/usr/share/pkgconfig/*.pc") + glob.glob(P + "/usr/lib/x86_64-linux-gnu/*.settings")
n = 0
for f in files:
    if os.path.islink(f) or not os.path.isfile(f):
        continue
    try:
        s = open(f).read()
    except UnicodeDecodeError:
        continue
    t = pat.sub(lambda m: m.group(1) + P + "/usr", s)
    # h5pcc -show lists the libraries of a static libhdf5 (-lcrypto -lcurl -lsz -lz), and
    # FindHDF5 wants each one's -dev link (libcurl.so, ...), absent on the GPU machine. HLP
    # links the shared libhdf5, whose own NEEDED entries bring them: keep only libm and libdl.
    t = re.sub(r'^H5BLD_LIBS=".*"$', 'H5BLD_LIBS="-ldl -lm "', t, flags=re.M)
    t = t.replace('STATIC_AVAILABLE="yes"', 'STATIC_AVAILABLE="no"')  # link the shared libhdf5
    if t != s:
        open(f, "w").write(t); n += 1
# what the Debian alternatives would have linked
b = P + "/usr/bin"
for link, target in [("mpicc", "mpicc.mpich"), ("mpicxx", "mpicxx.mpich"), ("mpiexec", "mpiexec.hydra"),
                     ("mpirun", "mpiexec.hydra"), ("h5pcc", "h5pcc.mpich")]:
    if os.path.exists(os.path.join(b, target)) and not os.path.lexists(os.path.join(b, link)):
        os.symlink(target, os.path.join(b, link))
print(f"relocated {n} files")
EOF
  echo "$stamp" >"$prefix/.stamp"
fi
libdir="$prefix/usr/lib/x86_64-linux-gnu"
export PATH="$prefix/usr/bin:$PATH"
export LD_LIBRARY_PATH="$libdir:$libdir/hdf5/mpich${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$prefix/usr/share/pkgconfig"
export CMAKE_POLICY_VERSION_MINIMUM=3.5   # CMake >= 4 and the bundle's older package configs
export HYDRA_LAUNCHER=fork                # one machine: no ssh
# HDF5 (Debian's build) NEEDs libcurl.so.4 for its read-only S3 driver alone, which HLP never
# uses (it opens local files); a CUDA image may have no libcurl. Then a stand-in of the eight
# functions HDF5 names, with curl's symbol version, lets the library load: curl_global_init
# succeeds, everything else fails as curl does without a network (CURLE_FAILED_INIT).
hdf5_so="$(ls "$libdir"/libhdf5_mpich.so.* 2>/dev/null | sed -n 1p)"
if [ -n "$hdf5_so" ] && [ ! -e "$libdir/libcurl.so.4" ] &&
   ldd "$hdf5_so" 2>/dev/null | grep 'libcurl.so.4 => not found' >/dev/null; then
  cat >"$prefix/curl-stand-in.c" <<'EOF'
#include <stddef.h>
int curl_global_init(long flags) { (void)flags; return 0; }
void curl_global_cleanup(void) {}
void* curl_easy_init(void) { return NULL; }
int curl_easy_setopt(void* h, int option, ...) { (void)h; (void)option; return 2; }
int curl_easy_perform(void* h) { (void)h; return 2; }
void curl_easy_cleanup(void* h) { (void)h; }
void* curl_slist_append(void* list, const char* s) { (void)list; (void)s; return NULL; }
void curl_slist_free_all(void* list) { (void)list; }
EOF
  echo 'CURL_OPENSSL_4 { global: curl_*; local: *; };' >"$prefix/curl-stand-in.map"
  if cc -shared -fPIC -O2 -o "$libdir/libcurl.so.4" -Wl,-soname,libcurl.so.4 \
       -Wl,--version-script="$prefix/curl-stand-in.map" "$prefix/curl-stand-in.c" >>"$log" 2>&1; then
    say "bundle: no libcurl.so.4 on this machine: HDF5 loads a stand-in ($libdir/libcurl.so.4; its S3 driver is unused)"
  else
    row bundle FAIL "no libcurl.so.4 here and the stand-in did not compile (cc; see $log)"; finish
  fi
fi
missing="$(for f in "$libdir"/lib{mpich,hdf5_mpich,boost_program_options,sentencepiece,pcre2-8,icuuc,icui18n,ucp,hwloc,slurm}.so.*; do
  [ -f "$f" ] && ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'; done; ldd "$prefix/usr/bin/mpiexec.hydra" | awk '/not found/ {print $1}')"
missing="$(echo "$missing" | sort -u | tr '\n' ' ' | sed 's/ *$//')"
if [ -n "$missing" ]; then
  row bundle FAIL "libraries the bundle needs but this machine lacks: $missing (add their Debian packages to tools/gpu-bundle.sh)"
  finish
fi
row bundle ok "$(wc -l <"$bundle/MANIFEST") packages, $(du -sm "$bundle" | cut -f1) MiB of .deb -> $prefix; ldd clean"

else
  row bundle skip "--no-bundle: dependencies from the environment (modules, CMAKE_PREFIX_PATH)"
fi
if [ "$skip_build" = 1 ]; then
  [ -x "$build/bin/hlp-train" ] || { row build FAIL "--skip-build but no $build/bin/hlp-train (run --only-build first)"; finish; }
  row build skip "--skip-build: reusing $build"
else
# ---------------------------------------------------------------- configure
if [ "$use_bundle" = 1 ]; then
  cm=(cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_PREFIX_PATH=$torch_prefix;$prefix/usr"
      "-DMPI_C_COMPILER=$prefix/usr/bin/mpicc.mpich" "-DMPI_CXX_COMPILER=$prefix/usr/bin/mpicxx.mpich"
      "-DMPIEXEC_EXECUTABLE=$prefix/usr/bin/mpiexec.hydra"
      "-DHDF5_C_COMPILER_EXECUTABLE=$prefix/usr/bin/h5pcc.mpich"
      "-DPKG_CONFIG_EXECUTABLE=$prefix/usr/bin/pkgconf"
      "-DBoost_NO_SYSTEM_PATHS=ON" "-DBoost_ROOT=$prefix/usr" "-DICU_ROOT=$prefix/usr")
else
  cm=(cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_PREFIX_PATH=$torch_prefix${CMAKE_PREFIX_PATH:+;${CMAKE_PREFIX_PATH//:/;}}")
fi
command -v ninja >/dev/null && cm+=(-G Ninja)
if [ "$dry" = 0 ]; then
  cm+=(-DHLP_WITH_CUDA=ON)
  [ -n "$nccl_home" ] && export NCCL_HOME="$nccl_home"
else
  cm+=("-DTorch_DIR=/usr/lib/x86_64-linux-gnu/cmake/Torch" -DHLP_WITH_CUDA=OFF)
fi
say "configure: ${cm[*]}"
if ! "${cm[@]}" >>"$log" 2>&1; then
  row configure FAIL "cmake failed (last lines of $log):"; tail -25 "$log"; finish
fi
# every dependency but LibTorch and CUDA must come from the prefix
outside=""
[ "$use_bundle" = 1 ] && outside="$(grep -E '^(HDF5_C_LIBRARY_[a-z0-9_]*|MPI_C_HEADER_DIR|MPI_mpi_LIBRARY|MPI_mpich_LIBRARY|HDF5_C_INCLUDE_DIR|HDF5_hdf5_LIBRARY_RELEASE|HDF5_C_LIBRARY_hdf5|Boost_INCLUDE_DIR|Boost_DIR|boost_program_options_DIR|Catch2_DIR|nlohmann_json_DIR|ICU_INCLUDE_DIR|ICU_UC_LIBRARY_RELEASE|pkgcfg_lib_SENTENCEPIECE_sentencepiece|pkgcfg_lib_PCRE2_pcre2-8|PKG_CONFIG_EXECUTABLE)[:=]' "$build/CMakeCache.txt" |
  grep -v "=$prefix" | grep -v '=$' | grep -vE '^HDF5_C_LIBRARY_(m|dl):' | cut -c1-160 | tr '\n' ';')"
if [ -n "$outside" ]; then
  row configure FAIL "found outside the bundle prefix: $outside"; finish
fi
row configure ok "$(grep -E '^-- HLP: LibTorch' "$log" | tail -1 | sed 's/^-- HLP: //')"
[ "$configure_only" = 1 ] && finish

# ---------------------------------------------------------------- build
say "build: cmake --build $build -j $jobs"
t0=$(date +%s)
tgt=(); for t in $targets; do tgt+=(--target "$t"); done
lim="$(budget 100000)"; [ "$lim" -gt 0 ] || lim=1
keep_going=(); grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt" && keep_going=(-- -k 0)
if ! timeout -k 5 "$lim" cmake --build "$build" -j "$jobs" "${tgt[@]}" "${keep_going[@]}" >>"$log" 2>&1; then
  # ninja -k 0 built every target it could: go on with what exists (its steps FAIL by themselves)
  failed_targets="$(grep -E '^FAILED: ' "$log" | sed 's/^FAILED: \(\[code=[0-9]*\] \)\?//' | tr '\n' ' ')"
  grep -E 'error|Error' "$log" | tail -15
  if [ -x "$build/bin/hlp-train" ]; then
    row build FAIL "$(( $(date +%s) - t0 )) s; failed: ${failed_targets:-see $log}; going on with what was built"
  else
    row build FAIL "build failed: ${failed_targets:-see $log}"; finish
  fi
else
  row build ok "$(( $(date +%s) - t0 )) s, -j $jobs${targets:+, targets: $targets}"
fi
fi
[ "$only_build" = 1 ] && finish
bin="$build/bin"
mpiexec="$prefix/usr/bin/mpiexec.hydra"
[ "$use_bundle" = 1 ] || mpiexec="$(grep -E '^MPIEXEC_EXECUTABLE:' "$build/CMakeCache.txt" | cut -d= -f2)"
mpi_extra=()   # Open MPI counts slots: 2 ranks in a 1-task allocation need --oversubscribe
"$mpiexec" --version 2>&1 | grep "Open MPI" >/dev/null && mpi_extra=(--oversubscribe)
has_device=0
"$bin/hlp-train" --help 2>/dev/null | grep -- '--device' >/dev/null && has_device=1
if [ "$has_device" = 0 ]; then
  if [ "$dry" = 1 ]; then row flags WARN "this hlp-train has no --device/--comm yet: the dry run leaves them out"
  else row flags FAIL "this hlp-train has no --device option"; finish; fi
fi

if [ "$perf_only" = 0 ]; then
# ---------------------------------------------------------------- ctest: CUDA-labelled + MPI comm on CUDA tensors
lim="$(budget 150)"; [ "$lim" -gt 0 ] || lim=1   # timeout 0 would mean no limit
( cd "$build" && timeout -k 5 "$lim" ctest -L cuda --output-on-failure -j1 ) >"$build/ctest-cuda.log" 2>&1
rc=$?
cat "$build/ctest-cuda.log" >>"$log"
line="$(cd "$build" && ctest -L cuda -N 2>/dev/null | grep -c 'Test *#')"
skipped="$(grep -cE '\*\*\*Skipped|Not Run' "$build/ctest-cuda.log")"
if [ "$dry" = 1 ]; then
  [ $rc = 0 ] && row ctest-cuda ok "$line cuda-labelled tests ran or skipped without a GPU ($skipped skipped)" ||
    row ctest-cuda FAIL "ctest -L cuda (see $log)"
else
  [ $rc = 0 ] && [ "$skipped" = 0 ] && row ctest-cuda ok "$line cuda-labelled tests passed" ||
    row ctest-cuda FAIL "ctest -L cuda: rc $rc, $skipped skipped on a GPU machine (see $log)"
fi
if [ "$dry" = 0 ]; then
  lim="$(budget 120)"; [ "$lim" -gt 0 ] || lim=1
  ( cd "$build" && HLP_TEST_DEVICE=cuda timeout -k 5 "$lim" ctest -R '^comm_mpi_np2$' \
      --output-on-failure -j1 ) >>"$log" 2>&1 &&
    row comm-mpi-cuda ok "comm_mpi_np2 with HLP_TEST_DEVICE=cuda (2 ranks, one GPU, MPI backend)" ||
    row comm-mpi-cuda FAIL "comm_mpi_np2 with HLP_TEST_DEVICE=cuda (see $log)"
fi

# ---------------------------------------------------------------- training runs
# run NAME NP DEVICE COMM [extra hlp-train args...] -> $runs/NAME.h5 (+ NAME.log)
run() {
  local name=$1 np=$2 device=$3 comm=$4; shift 4
  local args=(--model tiny --tokenizer byte --lora-rank 8 --lora-alpha 16 --seq-len 64 --micro-batch 2
              --global-batch 4 --steps 5 --warmup-steps 1 --lr 0.001 --seed 1234 --threads 1
              --loader-threads 1 --out "$runs/$name.h5" "$@")
  [ "$has_device" = 1 ] && args+=(--device "$device" --comm "$comm")
  rm -f "$runs/$name.h5"
  local limit; limit="$(budget "$run_timeout")"
  [ "$limit" -gt 0 ] || { echo "deadline: not started" >"$runs/$name.log"; return 1; }
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 timeout -k 5 "$limit" \
    "$mpiexec" "${mpi_extra[@]}" -n "$np" "$bin/hlp-train" "${args[@]}" >"$runs/$name.log" 2>&1
}
# losses A B TOL: max over steps of |a - b| / |b| (rank mean per step), and the step count
cmp_losses() {
  "$python" - "$@" <<'EOF'
import sys, h5py, numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
def losses(f):
    with h5py.File(f, "r") as h:
        x = np.asarray(h["/steps/loss"], dtype=np.float64)
        return x.mean(axis=0) if x.ndim > 1 else x   # [ranks, steps] -> per step
la, lb = losses(a), losses(b)
n = min(len(la), len(lb))
if n < 5 or len(la) != len(lb) or not np.all(np.isfinite(la)):
    print(f"steps {len(la)} vs {len(lb)}, finite {np.all(np.isfinite(la))}"); sys.exit(1)
rel = np.max(np.abs(la - lb) / np.abs(lb))
print(f"{n} steps, max rel diff {rel:.2e} (tol {tol:.0e}), loss {lb[0]:.4f} -> {lb[-1]:.4f}")
sys.exit(0 if rel <= tol else 1)
EOF
}
cuda_dev=cuda; [ "$dry" = 1 ] && cuda_dev=cpu
# pair ROW NP TOL [hlp-train args...]: ROW's run on the CPU and on CUDA, losses compared into
# pair_diff; returns 0 (within TOL), 1 (a run failed: its FAIL row is written) or 2 (they differ)
pair() {
  local r=$1 np=$2 tol=$3; shift 3
  pair_diff=""
  if ! run "$r-cpu" "$np" cpu mpi "$@"; then row "parity-$r" FAIL "--device cpu run failed: $(tail -1 "$runs/$r-cpu.log")"; return 1; fi
  if ! run "$r-cuda" "$np" "$cuda_dev" mpi "$@"; then row "parity-$r" FAIL "--device $cuda_dev run failed: $(tail -1 "$runs/$r-cuda.log")"; return 1; fi
  pair_diff="$(cmp_losses "$runs/$r-cuda.h5" "$runs/$r-cpu.h5" "$tol")" && return 0
  return 2
}
# half ROW BASE [hlp-train args...]: ROW in bf16 on CUDA, finite and within 5e-2 of BASE's fp32 run
half() {
  local r=$1 base=$2 d; shift 2
  if run "$r" 1 "$cuda_dev" mpi "$@" --precision bf16; then
    d="$(cmp_losses "$runs/$r.h5" "$runs/$base.h5" 5e-2)" && row "$r" ok "single: $d" || row "$r" FAIL "single bf16 vs fp32: $d"
  else
    row "$r" FAIL "run failed: $(tail -1 "$runs/$r.log")"
  fi
}
for spec in "single 1" "ddp 2" "fsdp2 2" "pp 2" "tp 2"; do
  read -r s np <<<"$spec"
  picked "$s" || { [ "$s" = single ] && picked bf16; } || continue   # bf16 compares with single-cuda
  pair "$s" "$np" 1e-4 --strategy "$s"; rc=$?   # pp and tp take the whole world (2) as their degree
  [ $rc = 1 ] || ! picked "$s" && continue
  [ $rc = 0 ] && row "parity-$s" ok "$np rank(s): $pair_diff" || row "parity-$s" FAIL "$np rank(s): $pair_diff"
done
if [ "$dry" = 0 ] && picked nccl1; then
  run ddp1-nccl 1 cuda nccl --strategy ddp && run ddp1-cpu 1 cpu mpi --strategy ddp &&
    d="$(cmp_losses "$runs/ddp1-nccl.h5" "$runs/ddp1-cpu.h5" 1e-4)" && row parity-nccl1 ok "ddp, 1 rank, --comm nccl: $d" ||
    row parity-nccl1 FAIL "ddp, 1 rank, --comm nccl: ${d:-run failed: $(tail -1 "$runs/ddp1-nccl.log")}"
fi
# bf16 (CUDA autocast; the dry run has no bf16 to compare on CPU fast enough: it runs it anyway)
picked bf16 && [ -f "$runs/single-cuda.h5" ] && half bf16 single-cuda --strategy single
# The Qwen3-Next mixture of experts (transformers 5 fixture) and expert parallelism over the MPI
# backend on the one GPU: the expert all-to-all's bytes on CUDA must equal the CPU run's.
moe_args=(--model-config "$here/tests/hf/transformers5/fixtures/qwen3_next_moe_a"
          --lora-targets in_proj_qkvz,in_proj_ba,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
a2a_same() {   # a2a_same A B: /steps/all_to_all_bytes of A equal B's, every entry > 0
  "$python" - "$@" <<'EOF'
import sys, h5py, numpy as np
def a2a(f):
    with h5py.File(f, "r") as h:
        return np.asarray(h["/steps/all_to_all_bytes"], dtype=np.int64)
a, b = a2a(sys.argv[1]), a2a(sys.argv[2])
same = a.shape == b.shape and np.array_equal(a, b) and np.all(a > 0)
print(f"all-to-all bytes a rank and step {int(a.min()):,}-{int(a.max()):,}" +
      (" = CPU's" if same else f" vs CPU {int(b.min()):,}-{int(b.max()):,} (DIFFER or 0)"))
sys.exit(0 if same else 1)
EOF
}
for spec in "moe-single 1 single" "moe-ep-ddp 2 ddp" "moe-ep-fsdp2 2 fsdp2"; do
  read -r r np s <<<"$spec"
  picked "$r" || { [ "$r" = moe-single ] && picked moe-bf16; } || continue
  ep=(); [ "$np" = 2 ] && ep=(--ep 2)
  pair "$r" "$np" 1e-4 --strategy "$s" "${moe_args[@]}" "${ep[@]}"; rc=$?
  [ $rc = 1 ] || ! picked "$r" && continue
  if [ "$np" = 2 ]; then
    b="$(a2a_same "$runs/$r-cuda.h5" "$runs/$r-cpu.h5")" || rc=2
    pair_diff="$pair_diff; $b"
  fi
  [ $rc = 0 ] && row "parity-$r" ok "$np rank(s)${ep:+, ep 2}: $pair_diff" || row "parity-$r" FAIL "$np rank(s): $pair_diff"
done
picked moe-bf16 && [ -f "$runs/moe-single-cuda.h5" ] && half moe-bf16 moe-single-cuda --strategy single "${moe_args[@]}"
# Context parallelism over the MPI backend on the one GPU, each scheme; the file names it.
cp_scheme_is() {   # cp_scheme_is FILE SCHEME ATTENTION
  "$python" - "$@" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    a = h["/context_parallel"].attrs
    got = [v.decode() if isinstance(v, bytes) else str(v) for v in (a.get("scheme", "?"), a.get("attention_scheme", "?"))]
print(f"/context_parallel scheme {got[0]}, attention {got[1]}")
sys.exit(0 if got == sys.argv[2:4] else 1)
EOF
}
for spec in "cp-chain chain ring" "cp-allgather allgather ring" "cp-alltoall alltoall alltoall"; do
  read -r r scheme att <<<"$spec"
  picked "$r" || continue
  pair "$r" 2 1e-4 --strategy cp --cp-scheme "$scheme" --cp-attention "$att"; rc=$?
  [ $rc = 1 ] && continue
  b="$(cp_scheme_is "$runs/$r-cuda.h5" "$scheme" "$att")" || rc=2
  [ $rc = 0 ] && row "parity-$r" ok "2 ranks, cp 2: $pair_diff; $b" || row "parity-$r" FAIL "2 ranks: $pair_diff; $b (asked $scheme / $att)"
done
# Qwen3.5 (transformers 5 fixture): its Gated DeltaNet variant and gated attention on CUDA
q35_args=(--model-config "$here/tests/hf/transformers5/fixtures/qwen3_5_text_a"
          --lora-targets in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
if picked qwen35-single || picked qwen35-bf16; then
  pair qwen35-single 1 1e-4 --strategy single "${q35_args[@]}"; rc=$?
  if [ $rc != 1 ] && picked qwen35-single; then
    [ $rc = 0 ] && row parity-qwen35-single ok "1 rank: $pair_diff" || row parity-qwen35-single FAIL "1 rank: $pair_diff"
  fi
  picked qwen35-bf16 && [ -f "$runs/qwen35-single-cuda.h5" ] && half qwen35-bf16 qwen35-single-cuda --strategy single "${q35_args[@]}"
fi
# fsdp2's per-rank held bytes: CUDA == CPU (== closed form, tests/train)
if [ -f "$runs/fsdp2-cuda.h5" ] && [ -f "$runs/fsdp2-cpu.h5" ]; then
  d="$("$python" - "$runs/fsdp2-cuda.h5" "$runs/fsdp2-cpu.h5" <<'EOF'
import sys, h5py, numpy as np
def held(f):
    with h5py.File(f, "r") as h:
        return {k: np.asarray(h["/steps/" + k]) for k in ("param_bytes", "grad_bytes", "optimizer_bytes")}
a, b = held(sys.argv[1]), held(sys.argv[2])
ok = all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) and np.all(a[k] > 0) for k in a)
last = lambda x: [int(v) for v in x[:, -1]] if x.ndim > 1 else [int(x[-1])]  # [ranks, steps]: each rank's last step
print(", ".join(f"{k} {last(a[k])}" for k in a) + ("" if ok else f"  vs CPU {', '.join(str(last(b[k])) for k in b)}"))
sys.exit(0 if ok else 1)
EOF
)" && row fsdp2-bytes ok "per rank on $cuda_dev = CPU (closed form): $d" || row fsdp2-bytes FAIL "$d"
elif picked fsdp2; then
  row fsdp2-bytes FAIL "no fsdp2 result files"
fi

# ---------------------------------------------------------------- report
if command -v gnuplot >/dev/null; then
  "$bin/hlp-analyze" report "$runs" -o "$runs/report" --warmup 1 >>"$log" 2>&1 &&
    row report ok "$runs/report/index.md" || row report FAIL "hlp-analyze report (see $log)"
else
  "$bin/hlp-analyze" table "$runs" --warmup 1 >"$runs/table.md" 2>>"$log" &&
    row report WARN "no gnuplot here: hlp-analyze table only ($runs/table.md, $(($(wc -l <"$runs/table.md") - 2)) rows)" ||
    row report FAIL "hlp-analyze table (see $log)"
fi

fi   # perf_only

# ---------------------------------------------------------------- perf: jet-nemotron-2b, LoRA r32, bf16, T = 4096
perf_targets="q_proj,k_proj,v_proj,o_proj,g_proj,a_proj,b_proj,gate_proj,up_proj,down_proj"
clocks() {   # clocks and power now, into $1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv >"$1" 2>&1
}
if [ "$perf" = 1 ]; then
  clocks "$runs/perf-clocks-before.csv"
  tok="$build/datasets/qwen3/tokenizer.json"
  q35_perf_dir="$here/bench/peer/qwen3_5_9b"
  q35_perf_targets="in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
  declare -A hlp_tps=()   # HLP run -> its median tokens/s (for a peer's ratio)
  # peer_row ROW JSON HLP-RUN WHAT: the peer's JSON summary against HLP-RUN's result file
  peer_row() {
    local r=$1 json=$2 base=$3 what=$4 d
    d="$(python3 - "$json" "$runs/perf-$base.h5" "${hlp_tps[$base]:-}" "$base" <<'EOF'
import sys, json, h5py
p = json.load(open(sys.argv[1]))
line = (f"{p['tokens_per_s']:,.0f} tokens/s (median of steps {p['warmup'] + 1}-{len(p['step_time_s'])}), peak "
        f"{p['peak_bytes'] / 2**30:.2f} GiB, {p['gpu']}, torch {p['torch']}, attention {p['attention']}, "
        + (f"transformers {p['transformers']}, peft {p['peft']}, linear path {p['linear_path']}, " if "peft" in p else "")
        + f"{p['params_trainable']:,} trainable of {p['params_total']:,}")
ok = True
try:
    with h5py.File(sys.argv[2], "r") as h:
        m = h["/model"].attrs
        ht, hp = int(m["params_trainable"]), int(m["params_total"])
    same = ht == p["params_trainable"] and hp == p["params_total"]
    line += f"; HLP {sys.argv[4]}: " + ("same parameter counts" if same else f"{ht:,} trainable of {hp:,} (DIFFER)")
    ok = same
    if sys.argv[3]:
        line += f"; HLP / peer tokens/s = {float(sys.argv[3]) / p['tokens_per_s']:.3f}"
except Exception as e:
    line += f"; no HLP {sys.argv[4]} to compare ({e.__class__.__name__})"
print(line)
sys.exit(0 if ok else 1)
EOF
)" && row "perf-$r" ok "$what: $d" || row "perf-$r" FAIL "$d"
  }
  for s in $perf_runs; do
    limit="$(budget "$perf_timeout")"
    case "$s" in
      peer|qwen35-peer)
        [ "$s" = peer ] && [ -z "$peer_export" ] && { row perf-peer skip "no --peer-export DIR"; continue; }
        [ "$limit" -gt 0 ] || { row "perf-$s" FAIL "deadline: not started"; continue; }
        if [ "$s" = peer ]; then
          cmd=(python3 "$here/bench/peer/peer_step.py" --export-dir "$peer_export" --device cuda
               --precision bf16 --steps 8 --warmup 2 --lr 1e-4 --seed 1234)
        else
          cmd=(python3 "$here/bench/peer/hf_peft_step.py" --config-dir "$q35_perf_dir" --device cuda
               --precision bf16 --lora-rank 32 --lora-alpha 64 --lora-targets "$q35_perf_targets"
               --seq-len 4096 --micro-batch 1 --steps 6 --warmup 2 --lr 1e-4 --seed 1234)
        fi
        if timeout -k 5 "$limit" "${cmd[@]}" --out "$runs/perf-$s.json" >"$runs/perf-$s.log" 2>&1; then
          if [ "$s" = peer ]; then peer_row peer "$runs/perf-peer.json" single "PyTorch peer, same shapes"
          else peer_row qwen35-peer "$runs/perf-qwen35-peer.json" qwen35 "transformers + PEFT, Qwen3.5-9B shapes"; fi
        else
          row "perf-$s" FAIL "peer run failed: $(grep -v '^ *$' "$runs/perf-$s.log" | tail -1)"
        fi
        continue ;;
      qwen35)
        what="Qwen3.5-9B r32 bf16 T=4096"
        model=(--strategy single --model-config "$q35_perf_dir" --lora-targets "$q35_perf_targets" --steps 6) ;;
      *)
        what="jet-nemotron-2b r32 bf16 T=4096"
        model=(--strategy "$s" --model jet-nemotron-2b --lora-targets "$perf_targets" --steps 8) ;;
    esac
    rm -f "$runs/perf-$s.h5"
    [ "$limit" -gt 0 ] || { row "perf-$s" FAIL "deadline: not started"; continue; }
    if OPENBLAS_NUM_THREADS=1 timeout -k 5 "$limit" "$mpiexec" "${mpi_extra[@]}" -n 1 "$bin/hlp-train" \
         --device cuda --comm nccl "${model[@]}" --tokenizer "$tok" --lora-rank 32 --lora-alpha 64 \
         --precision bf16 --seq-len 4096 --micro-batch 1 --global-batch 1 --warmup-steps 2 --lr 1e-4 \
         --seed 1234 $perf_args --out "$runs/perf-$s.h5" >"$runs/perf-$s.log" 2>&1; then
      # first word: the median tokens/s, unformatted (for the ratio); the rest is the row
      d="$("$python" - "$runs/perf-$s.h5" <<'EOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as h:
    tps = np.asarray(h["/steps/tokens_per_s"], dtype=float); pk = np.asarray(h["/steps/peak_bytes"], dtype=float)
    tps = tps.min(axis=0) if tps.ndim > 1 else tps   # [ranks, steps]
    dev = h.attrs.get("device", b"?"); dev = dev.decode() if isinstance(dev, bytes) else dev
    m = h["/model"].attrs
    total, trainable = int(m["params_total"]), int(m["params_trainable"])
med = np.median(tps[2:])
print(f"{med:.3f} {med:,.0f} tokens/s (median of steps 3-{len(tps)}), peak {pk.max() / 2**30:.2f} GiB, "
      f"{dev}, {trainable:,} trainable of {total:,} parameters")
EOF
)" && { hlp_tps[$s]="${d%% *}"; row "perf-$s" ok "$what: ${d#* }"; } ||
        row "perf-$s" FAIL "reading $runs/perf-$s.h5"
    else
      row "perf-$s" FAIL "run failed: $(tail -1 "$runs/perf-$s.log")"
    fi
  done
  clocks "$runs/perf-clocks-after.csv"
fi

finish
