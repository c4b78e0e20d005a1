#!/usr/bin/env bash
# Compile check of every HLP translation unit that includes LibTorch against LibTorch 2.6 with
# CUDA on (HLP_HAVE_CUDA=1, HLP_HAVE_CUDA_TORCH=1), on a machine that has only Debian's 1.13.
#
# Developer check, needs the network once (not part of `make test`):
#   tools/torch2-compile-check.sh [BUILD_DIR]        (or: make torch2-check)
#
# What it does
#   1. Reads Debian trixie's contrib index, takes libtorch-cuda-dev 2.6's Filename and SHA256,
#      downloads the .deb into BUILD_DIR/torch2-check/ (kept; checked against the index's SHA256)
#      and unpacks it with `dpkg -x` (headers + CMake config, 50 MB; the 480 MB runtime package
#      is not needed for a syntax check).
#   2. Takes BUILD_DIR/compile_commands.json (configures BUILD_DIR first if it is missing), keeps
#      the entries whose flags name LibTorch's include dir, and rewrites each command:
#      Debian 1.13's -isystem /usr/include/torch/csrc/api/include -> the 2.6 tree's two include
#      dirs (in front, so they win over /usr/include where 1.13's ATen/c10/torch live); CMake's
#      precompiled header -> one 2.6 PCH of <torch/torch.h> built here with the flags of CMake's own
#      PCH target (same reuse rule as CMake's REUSE_FROM); -o/-c dropped; -fsyntax-only, -std=gnu++17,
#      -DHLP_HAVE_CUDA=1 -DHLP_HAVE_CUDA_TORCH=1 -DUSE_C10D_NCCL and -isystem CUDA_HOME/include added.
#   3. First a preprocessor pass (-M) per file: a file that reaches no 2.6 header is skipped
#      ("no LibTorch"); a file that reaches a 1.13 header under /usr/include/{ATen,c10,torch,caffe2}
#      fails (the check would otherwise silently test the wrong version). Then -fsyntax-only.
#   Prints OK/FAIL per file, the first errors of each failure, a summary; exits 1 on any failure.
#
# CUDA: the 2.6 headers were written for CUDA 12; the GPU machines and this one have CUDA 13.
# Everything HLP includes (c10/cuda, ATen/cuda/CUDAContext.h -> cublas/cusparse/cusolver headers)
# compiles against CUDA 13's headers as they are; no shim is needed (if a future header needs one,
# put it under BUILD_DIR/torch2-check/cuda12-shim: it is searched before CUDA_HOME/include).
#
# Environment: JOBS (parallel compilers, default 1), CUDA_HOME (default /usr/local/cuda),
# HLP_TORCH2_FILTER (regex: check only matching source paths).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$here" && realpath -m "${1:-${BUILD_DIR:-build}}")"
cache="$build/torch2-check"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
jobs="${JOBS:-1}"
mirror="${HLP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
index_url="$mirror/dists/trixie/contrib/binary-amd64/Packages.xz"
package=libtorch-cuda-dev
mkdir -p "$cache"

say() { echo "[torch2-check] $*"; }
die() { echo "[torch2-check] error: $*" >&2; exit 2; }
command -v dpkg >/dev/null || die "dpkg not found (Debian/Ubuntu only)"
[ -f "$cuda_home/include/cuda_runtime_api.h" ] || die "no CUDA headers at $cuda_home/include (set CUDA_HOME)"

# ---- 1. the .deb, checked against the index ----
if [ ! -s "$cache/Packages.xz" ] || [ -n "$(find "$cache/Packages.xz" -mmin +1440 2>/dev/null)" ]; then
  say "index: $index_url"
  curl -fsSL --retry 2 -o "$cache/Packages.xz.part" "$index_url" || die "cannot fetch $index_url (network?)"
  mv "$cache/Packages.xz.part" "$cache/Packages.xz"
fi
xz -dc "$cache/Packages.xz" >"$cache/Packages"
stanza="$(awk -v p="$package" '$0=="Package: " p {on=1} on && /^$/ {exit} on {print}' "$cache/Packages")"
[ -n "$stanza" ] || die "$package not in $index_url"
version="$(sed -n 's/^Version: //p' <<<"$stanza")"
filename="$(sed -n 's/^Filename: //p' <<<"$stanza")"
sha256="$(sed -n 's/^SHA256: //p' <<<"$stanza")"
deb="$cache/$(basename "$filename")"
if [ ! -s "$deb" ] || ! echo "$sha256  $deb" | sha256sum -c --status; then
  say "downloading $package $version ($mirror/$filename)"
  curl -fsSL --retry 2 -o "$deb.part" "$mirror/$filename" || die "download failed: $mirror/$filename"
  mv "$deb.part" "$deb"
fi
echo "$sha256  $deb" | sha256sum -c --status || die "$deb: SHA256 differs from the index ($sha256)"
root="$cache/root-$version"
if [ ! -f "$root/.unpacked" ]; then
  rm -rf "$root" && mkdir -p "$root"
  dpkg -x "$deb" "$root"
  touch "$root/.unpacked"
fi
inc="$root/usr/include"
[ -f "$inc/torch/csrc/api/include/torch/version.h" ] || die "$deb has no torch/version.h"
torch_version="$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH)/ {v = v (v ? "." : "") $3} END {print v}' \
  "$inc/torch/csrc/api/include/torch/version.h")"
say "LibTorch headers $torch_version ($package $version, sha256 ok) in $root"

# ---- 2. compile commands ----
if [ ! -f "$build/compile_commands.json" ]; then
  say "configuring $build for compile_commands.json"
  cmake -S "$here" -B "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
fi
shim="$cache/cuda12-shim"
mkdir -p "$shim" "$cache/pch" "$cache/logs"

python3 - "$build/compile_commands.json" "$inc" "$cuda_home/include" "$shim" "$cache" "${HLP_TORCH2_FILTER:-}" <<'EOF'
import json, shlex, sys, os, re
cc_path, inc, cuda_inc, shim, cache, filt = sys.argv[1:]
deb_torch_api = "/usr/include/torch/csrc/api/include"
new_torch = ["-isystem", inc, "-isystem", inc + "/torch/csrc/api/include"]
extra = ["-fsyntax-only", "-DHLP_HAVE_CUDA=1", "-DHLP_HAVE_CUDA_TORCH=1", "-DUSE_C10D_NCCL",
         "-isystem", shim, "-isystem", cuda_inc]
pch_header = os.path.join(cache, "pch", "torch_pch.h")
entries = json.load(open(cc_path))
jobs, pch_cmd = [], None
for e in entries:
    args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
    if deb_torch_api not in args:
        continue
    out, i, uses_pch, is_pch_target = [], 0, False, False
    while i < len(args):
        a = args[i]
        if a == "-isystem" and args[i + 1] == deb_torch_api:
            out += new_torch; i += 2; continue
        if a == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
            uses_pch = True; i += 2; continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            i += 2; continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch"):
            i += 1; continue
        if a == "-x" and args[i + 1] == "c++-header":
            is_pch_target = True; i += 2; continue
        if a.startswith("-std="):
            out.append("-std=gnu++17"); i += 1; continue
        out.append(a); i += 1
    src = os.path.normpath(os.path.join(e["directory"], e["file"]))
    # the compiler (ccache launcher or not) is the first word that is not ccache
    while out and os.path.basename(out[0]) == "ccache":
        out.pop(0)
    out = [x for x in out if os.path.normpath(os.path.join(e["directory"], x)) != src]
    if is_pch_target:
        # the PCH of <torch/torch.h> with the flags of CMake's hlp_torch_pch target
        pch_cmd = out + ["-DHLP_HAVE_CUDA=1", "-DHLP_HAVE_CUDA_TORCH=1", "-DUSE_C10D_NCCL",
                         "-isystem", shim, "-isystem", cuda_inc,
                         "-x", "c++-header", pch_header, "-o", pch_header + ".gch"]
        continue
    if filt and not re.search(filt, src):
        continue
    if uses_pch:
        out += ["-Winvalid-pch", "-include", pch_header]
    jobs.append({"file": src, "dir": e["directory"], "cmd": out + extra + [src]})
with open(pch_header, "w") as f:
    f.write("#include <torch/torch.h>\n")
json.dump({"pch": pch_cmd, "jobs": sorted(jobs, key=lambda j: j["file"])},
          open(os.path.join(cache, "jobs.json"), "w"), indent=1)
print(len(jobs))
EOF

# ---- 3. compile ----
# one file: preprocessor pass (which LibTorch does it reach?), then the syntax check
cat >"$cache/check-one.py" <<'EOF'
import json, subprocess, sys, os, re, hashlib
cache = sys.argv[1]; inc = sys.argv[2]; src_root = sys.argv[4]; logs = sys.argv[3]
job = json.load(open(os.path.join(cache, "jobs.json")))["jobs"][int(sys.argv[5])]
rel = os.path.relpath(job["file"], src_root)
log = os.path.join(logs, rel.replace("/", "__") + ".log")
# -M: preprocessor only, the PCH replaced by its header so the real include set is seen
pre = []
skip = False
for a in job["cmd"]:
    if a == "-fsyntax-only":
        continue
    pre.append(a)
pre = [a for a in pre if a != "-Winvalid-pch"]
r = subprocess.run(pre[:-1] + ["-M", pre[-1]], cwd=job["dir"], capture_output=True, text=True)
deps = r.stdout.replace("\\\n", " ").split()
reaches_26 = any(d.startswith(inc + "/") for d in deps) or "-include" in job["cmd"]
old = sorted({d for d in deps if re.match(r"/usr/include/(ATen|c10|torch|caffe2)/", d)})
if r.returncode == 0 and not reaches_26:
    print(f"SKIP {rel} (no LibTorch)"); sys.exit(0)
msg = r.stderr
if r.returncode == 0 and old:
    open(log, "w").write("reaches Debian 1.13 headers:\n" + "\n".join(old) + "\n")
    print(f"FAIL {rel}  (reaches 1.13 headers: {old[0]} ...)"); sys.exit(1)
if r.returncode == 0:
    r = subprocess.run(job["cmd"], cwd=job["dir"], capture_output=True, text=True)
    msg = r.stderr
open(log, "w").write(" ".join(job["cmd"]) + "\n\n" + msg)
if r.returncode != 0:
    errs = [l for l in msg.splitlines() if ": error:" in l or "fatal error" in l][:4]
    print(f"FAIL {rel}\n" + "\n".join("     " + e for e in errs)); sys.exit(1)
warn = "  (PCH not used)" if "not using precompiled header" in msg or "invalid-pch" in msg else ""
print(f"OK   {rel}{warn}"); sys.exit(0)
EOF

pch_cmd="$(python3 -c 'import json,shlex,sys; c=json.load(open(sys.argv[1]))["pch"]; print(shlex.join(c) if c else "")' "$cache/jobs.json")"
if [ -n "$pch_cmd" ]; then
  stamp="$cache/pch/stamp"
  if [ ! -f "$cache/pch/torch_pch.h.gch" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$pch_cmd" ]; then
    say "building the 2.6 precompiled <torch/torch.h> (~30 s, ~600 MB)"
    rm -f "$stamp"
    (cd "$build" && eval "$pch_cmd") || die "the 2.6 PCH of <torch/torch.h> does not compile (see above)"
    echo "$pch_cmd" >"$stamp"
  fi
fi

n="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["jobs"]))' "$cache/jobs.json")"
say "checking $n translation units with LibTorch $torch_version + CUDA headers $(awk '/^#define CUDART_VERSION/ {print $3}' "$cuda_home/include/cuda_runtime_api.h") (JOBS=$jobs)"
rm -f "$cache"/logs/*.log
results="$cache/results.txt"
set +e
seq 0 $((n - 1)) |
  xargs -P "$jobs" -I{} nice -n 10 python3 "$cache/check-one.py" "$cache" "$inc" "$cache/logs" "$here" {} |
  tee "$results"
set -e
ok=$(grep -c '^OK' "$results" || true); fail=$(grep -c '^FAIL' "$results" || true)
skip=$(grep -c '^SKIP' "$results" || true)
echo
say "summary: LibTorch $torch_version + CUDA: $ok OK, $fail FAIL, $skip without LibTorch (of $n); logs: $cache/logs/"
[ "$fail" -eq 0 ] || exit 1
