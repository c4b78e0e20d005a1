#!/bin/bash
# Interoperability: a file written by 2 MPI ranks is read by h5dump (hdf5-tools) and by
# Python h5py (python3-h5py) — other tools see the same paths, shapes and values.
# usage: interop.sh MPIEXEC METRICS_TOOL OUTDIR SOURCE_DIR
set -euo pipefail
MPIEXEC=$1; TOOL=$2; OUT=$3; SRC=$4
mkdir -p "$OUT"
FILE="$OUT/interop.h5"
rm -f "$FILE"
"$MPIEXEC" -n 2 "$TOOL" write "$FILE" --steps 5 --flush-every 2

fail() { echo "interop FAILED: $*" >&2; exit 1; }

# h5dump: the root attributes and a step matrix.
h5dump -a /hlp_schema_version "$FILE" | grep "(0): 1" >/dev/null || fail "h5dump: hlp_schema_version != 1"
h5dump -a /complete "$FILE" | grep "(0): 1" >/dev/null || fail "h5dump: complete != 1"
h5dump -a /world_size "$FILE" | grep "(0): 2" >/dev/null || fail "h5dump: world_size != 2"
h5dump -a /strategy "$FILE" | grep '"ddp"' >/dev/null || fail "h5dump: strategy"
h5dump -H -d /steps/loss "$FILE" | grep "DATASPACE  SIMPLE { ( 2, 5 ) / ( 2, H5S_UNLIMITED ) }" >/dev/null \
  || fail "h5dump: /steps/loss is not [2, 5] extendible"
# loss is metric 0: rank*1000 + step (+ 0/100)
h5dump -d /steps/loss -w 0 "$FILE" | grep "(1,0): 1000, 1001, 1002, 1003, 1004" >/dev/null \
  || fail "h5dump: /steps/loss row of rank 1"
h5dump -H -d /trace/rank1 "$FILE" | grep 'H5T_STRING' >/dev/null || fail "h5dump: /trace/rank1 compound"
h5dump -a /model/params_total "$FILE" | grep "(0): 7400000" >/dev/null || fail "h5dump: /model/params_total"
h5dump -a /pipeline/stage_first_layer "$FILE" | grep "(0): 0, 4" >/dev/null || fail "h5dump: /pipeline"

# h5py: same file, from Python.
/usr/bin/python3 "$SRC/check_h5py.py" "$FILE" 2 5 || fail "h5py check"
echo "interop ok: h5dump and h5py read $FILE"
