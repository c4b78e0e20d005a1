#!/usr/bin/env bash
# hlp-sweep leaves out what hlp-plan predicts cannot fit on the site's GPU type (issue 24):
# tests/slurm/plan-prune.ini renders `small` on V100-16 at T 1024 (fits) and T 1048576 (predicted
# ~360 GiB a rank); the second is absent from the arrays and listed once, with its prediction.
set -euo pipefail
sweep_bin="$1"; job="$2"; out="$3"
rm -rf "$out"
log=$("$sweep_bin" "$job" --site psc-bridges2 --out "$out")
echo "$log"
fail() { echo "FAIL: $*"; exit 1; }
for c in single-n1-t1048576 ddp-n2-t1048576 fsdp2-n2-t1048576; do
  [ "$(grep -c "left out $c: predicted .* GiB .* > 16.0 GiB of a v100-16" <<<"$log")" = 1 ] ||
    fail "$c is not listed once as left out"
  [ ! -e "$out/configs/$c.ini" ] || fail "$c was rendered"
  grep -q "^$c: predicted" "$out/pruned.txt" || fail "$c missing from pruned.txt"
done
for c in single-n1-t1024 ddp-n2-t1024 fsdp2-n2-t1024; do
  [ -e "$out/configs/$c.ini" ] || fail "$c (fits) was left out"
  grep -q "left out $c" <<<"$log" && fail "$c (fits) is listed as left out"
done
grep -q "3 configurations (6 excluded, 3 predicted not to fit on v100-16 left out)" <<<"$log" ||
  fail "summary line"
# the arrays: 1 task of 1 rank, 2 of 2 ranks
grep -q "plan-prune-n1.sbatch *1 task(s) of 1 rank(s)" <<<"$log" || fail "n1 array"
grep -q "plan-prune-n2.sbatch *2 task(s) of 2 rank(s)" <<<"$log" || fail "n2 array"
# --no-plan keeps all six
log=$("$sweep_bin" "$job" --site psc-bridges2 --out "$out-all" --no-plan)
grep -q "6 configurations (6 excluded)" <<<"$log" || fail "--no-plan does not keep every configuration"
echo "plan pruning ok"
