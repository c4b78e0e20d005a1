#!/usr/bin/env bash
# The real signal path: hlp-train under mpiexec gets SIGTERM (as Slurm sends before a time limit)
# -> checkpoints, flushes its result file (complete = 0) and exits 75; the requeued job
# (--resume) continues from the checkpoint and finishes with exit 0 and complete = 1, in the
# same result file: every step 0..N-1 once, two launches in /segments. Then another run (other
# --lr) resuming on that file is refused (every rank exits, rank 0 says why in one line; exit 2)
# and the file stays as it was.
set -u
HLP_TRAIN=$1
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
dir=$(mktemp -d /tmp/hlp_signal_resume.XXXXXX)
trap 'pkill -KILL -f "^[^ ]*hlp-train .*$dir" 2>/dev/null; rm -rf "$dir"' EXIT
args=(--strategy fsdp2 --steps 400 --seq-len 32 --checkpoint-dir "$dir/ckpt" --out "$dir/run.h5")

"$MPIEXEC" -n 2 "$HLP_TRAIN" "${args[@]}" > "$dir/first.log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do grep -q "step 3/" "$dir/first.log" && break; sleep 0.1; done
grep -q "step 3/" "$dir/first.log" || { echo "FAIL: run did not reach step 3"; cat "$dir/first.log"; exit 1; }
pkill -TERM -f "^[^ ]*hlp-train .*$dir"   # the ranks, not mpiexec
wait $launcher; rc=$?
[ "$rc" -eq 75 ] || { echo "FAIL: exit $rc after SIGTERM, want 75"; cat "$dir/first.log"; exit 1; }
grep -q "checkpoint saved" "$dir/first.log" || { echo "FAIL: no checkpoint message"; exit 1; }
complete=$(h5dump -a /complete "$dir/run.h5" | grep -A1 DATA | tail -1 | tr -dc '0-9' | cut -c2-)
[ "$complete" = "0" ] || { echo "FAIL: stopped run's file says complete=$complete"; exit 1; }
stopped_at=$(sed -n 's/^step_//p' "$dir/ckpt/latest")
echo "ok: SIGTERM -> exit 75, checkpoint at step $stopped_at, result file complete = 0"

args[3]=$((stopped_at + 2))  # --steps: two more steps after resuming
"$MPIEXEC" -n 2 "$HLP_TRAIN" "${args[@]}" --resume > "$dir/second.log" 2>&1; rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: resumed run exit $rc"; cat "$dir/second.log"; exit 1; }
grep -q "resumed from .*step_$stopped_at" "$dir/second.log" || { echo "FAIL: did not resume"; cat "$dir/second.log"; exit 1; }
grep -q "step $((stopped_at + 2))/$((stopped_at + 2))" "$dir/second.log" || { echo "FAIL: no final step"; cat "$dir/second.log"; exit 1; }
echo "ok: resumed at step $stopped_at and finished"
# The result file names the MPI that ran (root attribute mpi_version): this build's (HLP_MPI).
mpi_version=$(h5dump -a /mpi_version "$dir/run.h5" | sed -n 's/^ *(0): "\(.*\)"$/\1/p')
case "${HLP_MPI:-mpich}" in openmpi) want="Open MPI" ;; *) want="MPICH" ;; esac
[[ "$mpi_version" == *"$want"* ]] || { echo "FAIL: mpi_version '$mpi_version' does not name $want"; exit 1; }
echo "ok: mpi_version = $mpi_version"

# The result file of both launches: steps 0..N-1 exactly once, the segments, complete = 1.
/usr/bin/python3 - "$dir/run.h5" "$((stopped_at + 2))" "$stopped_at" <<'PY' || { echo "FAIL: the resumed result file"; exit 1; }
import sys, h5py
path, n, resumed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "r") as f:
    steps = list(f["steps/step"][:])
    assert steps == list(range(n)), f"/steps/step is {steps}, want 0..{n - 1} once"
    assert f["steps/loss"].shape == (2, n), f["steps/loss"].shape
    seg = f["segments"].attrs
    assert list(seg["first_step"]) == [0, resumed], list(seg["first_step"])
    assert len(seg["launches"].splitlines()) == 2
    assert int(f.attrs["complete"]) == 1
    for r in range(2):
        ev = f[f"trace/rank{r}"]["step"]
        for s in range(n):
            assert (ev == s).sum() > 0, f"rank {r}: no trace rows for step {s}"
        assert ev.max() == n - 1
    end = f["steps/step_end_s"][0]
    assert all(end[i] < end[i + 1] for i in range(n - 1)), "step_end_s not increasing across launches"
print(f"ok: result file holds steps 0..{n - 1} once; segments first_step [0, {resumed}]")
PY

# Another run resuming on this file (--lr differs): refused on every rank, the file unchanged.
before=$(md5sum < "$dir/run.h5")
"$MPIEXEC" -n 2 "$HLP_TRAIN" "${args[@]}" --resume --lr 0.005 > "$dir/foreign.log" 2>&1; rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: another run's resume exit $rc, want 2"; cat "$dir/foreign.log"; exit 1; }
lines=$(grep -c "belongs to another run (lr '0.001' there, '0.005' here)" "$dir/foreign.log")
[ "$lines" -eq 1 ] || { echo "FAIL: want the refusal once (rank 0 speaks), got $lines"; cat "$dir/foreign.log"; exit 1; }
[ "$(md5sum < "$dir/run.h5")" = "$before" ] || { echo "FAIL: the refused run changed the file"; exit 1; }
echo "ok: another run's resume refused (exit 2, one line), the file unchanged"
