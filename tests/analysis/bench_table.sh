#!/bin/bash
# Benchmark: N small result files (8 steps, 1 rank) written through the real ResultWriter by
# 2 MPI ranks, then `hlp-analyze table` over all of them. Prints the times; asserts only that
# every file was read (rows and runs add up), not a wall-clock limit.
# Usage: bench_table.sh MPIEXEC WRITE_FIXTURES HLP_ANALYZE OUTDIR [N=1000]
set -euo pipefail
MPIEXEC=$1 WRITER=$2 ANALYZE=$3 OUT=$4 N=${5:-1000}
rm -rf "$OUT"
t0=$(date +%s.%N)
"$MPIEXEC" -n 2 "$WRITER" many "$OUT/files" "$N"
t1=$(date +%s.%N)
TIMEFORMAT='%R s wall, %U s user, %S s sys'
{ time "$ANALYZE" table "$OUT/files" --csv > "$OUT/table.csv" ; } 2> "$OUT/time_csv.txt"
{ time "$ANALYZE" table "$OUT/files" > "$OUT/table.md" ; } 2> "$OUT/time_md.txt"
files=$(find "$OUT/files" -name '*.h5' | wc -l)
rows=$(($(wc -l < "$OUT/table.csv") - 1))
runs=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "runs") c = i }
                NR > 1 { s += $c } END { print s }' "$OUT/table.csv")
echo "bench: wrote $files files in $(echo "$t1 - $t0" | bc) s"
echo "bench: hlp-analyze table --csv over $files files: $(tail -1 "$OUT/time_csv.txt") ($rows configurations, $runs runs)"
echo "bench: hlp-analyze table (markdown) over $files files: $(tail -1 "$OUT/time_md.txt")"
echo "bench: load average during the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(getconf _NPROCESSORS_ONLN) cores"
[ "$files" -eq "$N" ] && [ "$runs" -eq "$N" ] && [ "$rows" -eq 20 ] || { echo "bench: counts do not add up"; exit 1; }
