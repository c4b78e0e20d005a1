#!/bin/bash
# The reader refuses foreign, truncated, non-HDF5 and missing files with hlp::UserError.
# usage: reject.sh MPIEXEC METRICS_TOOL OUTDIR
set -euo pipefail
MPIEXEC=$1; TOOL=$2; OUT=$3
mkdir -p "$OUT/reject"
"$MPIEXEC" -n 2 "$TOOL" write "$OUT/reject/good.h5" --steps 3 --flush-every 2
"$TOOL" reject "$OUT/reject/good.h5" "$OUT/reject"
