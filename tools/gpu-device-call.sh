#!/usr/bin/env bash
# The one prepared command of a lent-GPU call (issue 33), run in the repository root there:
#   tools/gpu-device-call.sh [gpu-check options...]
# Needs, carried with the working tree: build-gpu-bundle/ (tools/gpu-bundle.sh) and
# gpu-peer/jet-nemotron-2b/ (the peer's architecture, written here by
#   build/bin/hlp-export-init --model jet-nemotron-2b --tokenizer build/datasets/qwen3/tokenizer.json
#     --seq-len 4096 --global-batch 1 --lora-rank 32 --lora-alpha 64 --lora-targets
#     q_proj,k_proj,v_proj,o_proj,g_proj,a_proj,b_proj,gate_proj,up_proj,down_proj --seed 1234
#     --batches 1 --weights no --out-dir gpu-peer/jet-nemotron-2b).
# Writes into $OUT (default ./gpu-out): env.txt (GPU, driver, clocks, torch / CUDA / compiler
# versions), gpu-check.out (the check's rows and summary), gpu-check.log, runs.tgz (every run's
# log, the result files under 12 MiB, the peer's JSON, clocks), and the perf result files.
# HLP_GPU_DEADLINE (default 480 s): no run starts later (gpu-check.sh --deadline). A dry run
# here: tools/gpu-device-call.sh --cpu-dry-run. Exit status: gpu-check.sh's.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
out="${OUT:-$here/gpu-out}"
mkdir -p "$out"
t0=$(date +%s)
{
  echo "date: $(date -u +%FT%TZ)  kernel: $(uname -r)  cores: $(nproc)"
  nvidia-smi
  nvidia-smi -q -d CLOCK,PERFORMANCE,POWER 2>&1 | sed -n '1,80p'
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
      "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpu", torch.cuda.get_device_name(),
      "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI, "cmake prefix", torch.utils.cmake_prefix_path)'
  for c in g++ c++ gcc cmake ninja nvcc; do
    echo "$c: $(command -v "$c" || echo MISSING) $("$c" --version 2>&1 | grep -m1 -E '[0-9]+\.[0-9]+')"
  done
  free -g | sed -n 2p
  df -h "$here" | tail -1
} >"$out/env.txt" 2>&1
sed -n '1,3p;/^python /,$p' "$out/env.txt"
# what the check runs, and no more (hlp-nccl-probe exists only in a CUDA build)
targets="hlp-train hlp-analyze hlp_sdpa_test hlp-test-comm-mpi hlp_qwen3_tokenizer"
b="$here/build-gpu"
case " $* " in
  *" --cpu-dry-run "*) b="$here/build-gpu-dry" ;;
  *) targets="$targets hlp-nccl-probe" ;;
esac
# --deadline: the summary and the files come back inside the device tool's 10-minute call
tools/gpu-check.sh --jobs "$(nproc)" --targets "$targets" --peer-export gpu-peer/jet-nemotron-2b \
  --deadline "${HLP_GPU_DEADLINE:-480}" --run-timeout 60 --perf-timeout 180 "$@" 2>&1 |
  tee "$out/gpu-check.out"
rc=${PIPESTATUS[0]}
cp "$b/gpu-check.log" "$out/" 2>/dev/null
cp "$b"/gpu-check-runs/perf-*.h5 "$b"/gpu-check-runs/perf-*.json "$out/" 2>/dev/null
(cd "$b" && find gpu-check-runs ctest-cuda.log -type f ! -name 'perf-*.h5' -size -12M 2>/dev/null |
  tar -czf "$out/runs.tgz" -T -)
ls -la "$out"
echo "gpu-device-call: rc $rc, wall $(($(date +%s) - t0)) s"
exit "$rc"
