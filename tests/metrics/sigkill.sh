#!/bin/bash
# Crash safety: a 2-rank writer flushes every 4 of its 10 steps, then is SIGKILLed (as Slurm does
# at the time limit) before finish(). The file must open, hold the 8 flushed steps, and say
# complete = 0.
# usage: sigkill.sh MPIEXEC METRICS_TOOL OUTDIR
set -uo pipefail
MPIEXEC=$1; TOOL=$2; OUT=$3
mkdir -p "$OUT"
FILE="$OUT/killed.h5"; READY="$OUT/killed.ready"
rm -f "$FILE" "$READY"
"$MPIEXEC" -n 2 "$TOOL" write "$FILE" --steps 10 --flush-every 4 --ready-file "$READY" &
LAUNCHER=$!
# Whatever happens below, leave no rank behind.
cleanup() {
  [ -f "$READY" ] && for pid in $(cat "$READY"); do kill -9 "$pid" 2>/dev/null; done
  kill -9 $LAUNCHER 2>/dev/null
  return 0
}
trap cleanup EXIT
for _ in $(seq 1 1200); do
  [ -f "$READY" ] && break
  kill -0 $LAUNCHER 2>/dev/null || { echo "writer exited before it was ready" >&2; exit 1; }
  sleep 0.1
done
if [ ! -f "$READY" ]; then
  echo "writer never became ready" >&2; kill -9 $LAUNCHER; exit 1
fi
# kill -9 every rank (their pids are in the ready file), then reap the launcher.
for pid in $(cat "$READY"); do kill -9 "$pid"; done
wait $LAUNCHER 2>/dev/null
LAUNCHER_RC=$?
echo "killed ranks $(tr '\n' ' ' < "$READY")(mpiexec exit $LAUNCHER_RC)"
"$TOOL" check "$FILE" --world 2 --steps 8 --complete 0
