#!/usr/bin/env bash
# --device / --comm through hlp-train, launched like a user would (1 rank and mpiexec -n 2), on
# a machine without a usable GPU (no GPU, or Debian's CPU-only LibTorch):
#   --device cuda          one line on stderr saying why, exit 2 on every rank, no hang
#   bad --device / --comm  one line, exit 2
#   --comm nccl on the CPU one line, exit 2
#   --base-dtype other than fp32 or the compute dtype: one line, exit 2
#   --device cpu / auto    runs; the result file records device and backend (h5dump)
#   --help                 documents --device and --comm
set -u
HLP_TRAIN=$1
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# expect NAME WANT_RC EXPECTED_SUBSTRING -- command...
source "$(dirname "$0")/expect_one_line_error.sh"
expect() { expect_one_line_error "$@"; }

for launch in "" "$MPIEXEC -n 2"; do
  tag=${launch:+mpi2-}
  expect "${tag}device-cuda" 2 "--device cuda: " -- $launch "$HLP_TRAIN" --device cuda --steps 1
  expect "${tag}device-bad" 2 "--device: unknown value 'gpu'" -- $launch "$HLP_TRAIN" --device gpu
  expect "${tag}comm-bad" 2 "--comm: unknown value 'gloo'" -- $launch "$HLP_TRAIN" --comm gloo
  expect "${tag}comm-nccl-cpu" 2 "--comm nccl" -- $launch "$HLP_TRAIN" --comm nccl --device cpu
  expect "${tag}comm-nccl-auto" 2 "--comm nccl" -- $launch "$HLP_TRAIN" --comm nccl
  # frozen weights stored in a dtype the compute would cast every step
  expect "${tag}base-dtype-bf16-fp32" 2 "--base-dtype bf16 with --precision fp32 is not supported" \
    -- $launch "$HLP_TRAIN" --base-dtype bf16
  expect "${tag}base-dtype-fp16-bf16" 2 "--base-dtype fp16 with --precision bf16 is not supported" \
    -- $launch "$HLP_TRAIN" --base-dtype fp16 --precision bf16
  expect "${tag}base-dtype-bad" 2 "--base-dtype: unknown value 'int4'" \
    -- $launch "$HLP_TRAIN" --base-dtype int4
done

# --help documents both options.
# (lines joined and blanks squeezed: the help wraps at a width that may change)
"$HLP_TRAIN" --help 2>&1 | tr -s ' \n' '  ' >"$tmp/help"
for opt in "--device arg" "--comm arg" "cuda when LibTorch has CUDA and a GPU is visible" \
           "CUDA tensors are staged through pinned host memory"; do
  if grep -q -- "$opt" "$tmp/help"; then echo "ok   help mentions '$opt'"
  else echo "FAIL help lacks '$opt'"; fail=1; fi
done

# A real 2-rank run on the CPU: the result file says so. auto must resolve to cpu here.
run_and_check() {
  local name=$1; shift
  local out="$tmp/$name.h5"
  if ! timeout 120 $MPIEXEC -n 2 "$HLP_TRAIN" --strategy ddp --model tiny --seq-len 32 \
         --micro-batch 2 --global-batch 4 --steps 2 --threads 1 --out "$out" "$@" \
         >"$tmp/run.out" 2>&1; then
    echo "FAIL $name: run failed"; cat "$tmp/run.out"; fail=1; return
  fi
  local attr value
  for pair in "device_kind=cpu" "device=cpu" "backend=mpi" "device_name=cpu" \
              "device_count=0" "cuda_runtime_version=" "device_compute_capability="; do
    attr=${pair%%=*}; value=${pair#*=}
    got=$(h5dump -a "/$attr" "$out" 2>/dev/null | sed -n 's/^ *(0): *//p' | tr -d '"')
    if [ "$got" = "$value" ]; then echo "ok   $name: $attr = '$got'"
    else echo "FAIL $name: $attr = '$got' (want '$value')"; fail=1; fi
  done
}
run_and_check device-cpu --device cpu --comm mpi
run_and_check device-auto
exit $fail
