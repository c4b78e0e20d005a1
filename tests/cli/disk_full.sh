#!/usr/bin/env bash
# A disk that fills up during a run (issue 27), on a real small tmpfs mounted in a private mount
# namespace (unshare: root, or an unprivileged user namespace where the kernel allows it; else
# the test is skipped with the reason). A filler file leaves a set amount of space free.
#   1. The trace fills the disk: the writer drops the trace, warns once naming the file and
#      ENOSPC, and the steps go on in its disk-full reserve: exit 0, complete = 1, every step.
#   2. A reserve too small for the rest of the run (--result-reserve-kib 8): exit 74, one error
#      line naming the file and ENOSPC; the file is readable (h5py, hlp-analyze) with the steps
#      done before, as printed, complete = 0. Also on 2 ranks.
#   3. A checkpoint that does not fit: exit 74, the line names the checkpoint file and ENOSPC;
#      `latest` still names the previous checkpoint, and a run resumes from it.
#   disk_full.sh BIN_DIR
set -u
BIN=$1
HERE="$(cd "$(dirname "$0")" && pwd)"
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
if [ -z "${HLP_DISK_FULL_INNER:-}" ]; then
  # Re-run this script in its own mount namespace, where the tmpfs is private and goes away
  # with the script.
  for how in "unshare --mount --propagation private" "unshare --user --map-root-user --mount"; do
    if $how true 2>/dev/null; then
      HLP_DISK_FULL_INNER=1 exec $how bash "$0" "$@"
    fi
  done
  echo "SKIP disk_full: cannot make a private mount namespace (unshare needs root or" \
       "unprivileged user namespaces) for a small tmpfs"
  exit 77
fi
tmp=$(mktemp -d)
disk=$tmp/disk
mkdir -p "$disk"
trap 'umount "$disk" 2>/dev/null; rm -rf "$tmp"' EXIT
if ! mount -t tmpfs -o size=4m tmpfs "$disk" 2>"$tmp/mount.err"; then
  echo "SKIP disk_full: cannot mount a tmpfs: $(cat "$tmp/mount.err")"
  exit 77
fi
fail=0
source "$HERE/expect_one_line_error.sh"
train=("$BIN/hlp-train" --model tiny --threads 1 --loader-threads 1 --flush-every 1 --trace)
export OPENBLAS_NUM_THREADS=1

# Empties the disk and leaves $1 KiB free on it.
leave_free() {
  rm -rf "${disk:?}"/*
  local avail; avail=$(df -k --output=avail "$disk" | tail -1)
  dd if=/dev/zero of="$disk/filler" bs=1k count=$((avail - $1)) status=none
}

check_file() {  # check_file NAME FILE STDOUT MODE [STEPS]
  local name=$1; shift
  if /usr/bin/python3 "$HERE/disk_full_check.py" "$@" >"$tmp/check" 2>&1; then
    echo "ok   $name: $(cat "$tmp/check")"
  else
    echo "FAIL $name: $(cat "$tmp/check")"; fail=1
  fi
  if ls "$disk"/*.reserve >/dev/null 2>&1; then echo "FAIL $name: the reserve file is left"; fail=1; fi
}

# 1. Trace dropped, steps go on.
leave_free 900
"${train[@]}" --steps 60 --out "$disk/dropped.h5" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL trace-dropped: exit $rc"; cat "$tmp/err"; fail=1
elif [ "$(grep -c . "$tmp/err")" -ne 1 ] ||
     ! grep -qF "hlp-train: warning: result file '$disk/dropped.h5': " "$tmp/err" ||
     ! grep -qF "No space left on device (ENOSPC); the trace stops, the steps go on" "$tmp/err"; then
  echo "FAIL trace-dropped: want one warning naming the file and ENOSPC, got:"; cat "$tmp/err"; fail=1
else
  echo "ok   trace-dropped: $(cat "$tmp/err")"
fi
check_file trace-dropped-file "$disk/dropped.h5" "$tmp/out" dropped 60
mkdir -p "$tmp/res1" && cp "$disk/dropped.h5" "$tmp/res1/"
if "$BIN/hlp-analyze" table "$tmp/res1" --csv >"$tmp/table" 2>"$tmp/aerr" &&
   grep -q "^single," "$tmp/table"; then
  echo "ok   trace-dropped-analyze: hlp-analyze reads it"
else
  echo "FAIL trace-dropped-analyze:"; cat "$tmp/table" "$tmp/aerr"; fail=1
fi

# 2. Out of space for good: the run stops, the file keeps every step done (1 and 2 ranks).
for launch in "" "$MPIEXEC -n 2"; do
  tag=${launch:+mpi2-}
  leave_free 700
  out="$disk/stopped.h5"
  strategy=single; [ -n "$launch" ] && strategy=ddp
  timeout 120 $launch "${train[@]}" --strategy $strategy --steps 60 --result-reserve-kib 8 --out "$out" \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
  # MPICH adds its own "application called MPI_Abort" line on 2 ranks: the error is the
  # hlp-train line.
  grep -v "MPI_Abort\|^$" "$tmp/err" >"$tmp/err1"
  if [ "$rc" -ne 74 ] && [ -z "$launch" ]; then
    echo "FAIL ${tag}stopped: exit $rc (want 74)"; cat "$tmp/err"; fail=1
  elif [ -n "$launch" ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; }; then
    echo "FAIL ${tag}stopped: exit $rc (want 74: failed, no hang)"; cat "$tmp/err"; fail=1
  elif [ "$(grep -c "hlp-train: error:" "$tmp/err1")" -ne 1 ] ||
       ! grep -qF "hlp-train: error: result file '$out': " "$tmp/err1" ||
       ! grep -qF "No space left on device (ENOSPC), also after using the disk-full reserve; the file keeps all" "$tmp/err1" ||
       ! iconv -f UTF-8 -t UTF-8 "$tmp/err1" >/dev/null 2>&1; then
    echo "FAIL ${tag}stopped: want one error line naming the file and ENOSPC, got:"; cat "$tmp/err"; fail=1
  else
    echo "ok   ${tag}stopped (exit $rc): $(grep "hlp-train: error:" "$tmp/err1")"
  fi
  check_file "${tag}stopped-file" "$out" "$tmp/out" stopped
  kept=$(sed -n "s/.*the file keeps all \([0-9]*\) step.*/\1/p" "$tmp/err1")
  mkdir -p "$tmp/res2$tag" && cp "$out" "$tmp/res2$tag/"
  "$BIN/hlp-analyze" table "$tmp/res2$tag" --csv >"$tmp/table" 2>"$tmp/aerr"
  if ! grep -q "incomplete run" "$tmp/aerr"; then
    echo "FAIL ${tag}stopped-analyze: not reported as incomplete:"; cat "$tmp/aerr"; fail=1
  elif ! "$BIN/hlp-analyze" table "$tmp/res2$tag" --csv --include-incomplete --warmup 0 \
         >"$tmp/table" 2>"$tmp/aerr"; then
    echo "FAIL ${tag}stopped-analyze: --include-incomplete:"; cat "$tmp/aerr"; fail=1
  else
    col=$(head -1 "$tmp/table" | tr ',' '\n' | grep -n '^steps_used$' | cut -d: -f1)
    used=$(sed -n 2p "$tmp/table" | cut -d, -f"$col")
    if [ -n "$kept" ] && [ "$used" = "$kept" ]; then
      echo "ok   ${tag}stopped-analyze: incomplete, $used steps used with --include-incomplete"
    else
      echo "FAIL ${tag}stopped-analyze: steps_used '$used', the error said '$kept'"; cat "$tmp/table"; fail=1
    fi
  fi
done

# 3. A checkpoint that does not fit: the previous one stays usable.
leave_free 260
ck=$disk/ckpt
"${train[@]}" --steps 8 --checkpoint-dir "$ck" --checkpoint-every 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 74 ] || [ "$(grep -c . "$tmp/err")" -ne 1 ] ||
   ! grep -qE "hlp-train: error: cannot write '$ck/step_[0-9]+/rank_0\.(pt|txt)': No space left on device \(ENOSPC\)" "$tmp/err"; then
  echo "FAIL checkpoint: exit $rc, want 74 and one line naming the file and ENOSPC:"; cat "$tmp/err"; fail=1
else
  echo "ok   checkpoint (exit $rc): $(cat "$tmp/err")"
fi
latest=$(cat "$ck/latest" 2>/dev/null)
if [ -z "$latest" ] || [ ! -s "$ck/$latest/rank_0.pt" ] || [ ! -s "$ck/$latest/rank_0.txt" ] ||
   ls "$ck"/*/*.tmp "$ck"/*.tmp >/dev/null 2>&1; then
  echo "FAIL checkpoint-latest: latest '$latest', files:"; ls -lR "$ck"; fail=1
else
  cp -r "$ck" "$tmp/ckpt"
  umount "$disk"
  "${train[@]}" --steps 8 --checkpoint-dir "$tmp/ckpt" --resume >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" -eq 0 ] && grep -q "resumed from .*/$latest\$" "$tmp/out" && grep -q "step 8/8" "$tmp/out"; then
    echo "ok   checkpoint-resume: $latest is whole; resumed: $(grep -m1 resum "$tmp/out")"
  else
    echo "FAIL checkpoint-resume (exit $rc) from $latest:"; cat "$tmp/out" "$tmp/err"; fail=1
  fi
fi
exit $fail
