#!/usr/bin/python3
"""Checks a result file written onto a disk that filled up (tests/cli/disk_full.sh).

disk_full_check.py FILE STDOUT MODE [STEPS]
  MODE dropped: the run went on after the trace was dropped: complete = 1, every step
                (STEPS of them) in /steps, trace_dropped names ENOSPC, the trace shorter.
  MODE stopped: the run stopped: complete = 0, trace_dropped set; every step the run printed
                is in the file with the same loss, and the step it was finishing when the
                disk filled (written before its progress line) may be too.
Prints one line; exits 1 on a mismatch.
"""
import math
import re
import sys

import h5py


def main():
    path, stdout_path, mode = sys.argv[1:4]
    printed = [float(m.group(2)) for m in
               re.finditer(r"\[hlp-train\] step (\d+)/\d+  loss ([0-9.]+)", open(stdout_path).read())]
    with h5py.File(path, "r") as f:
        complete = int(f.attrs["complete"])
        dropped = f.attrs["trace_dropped"]
        dropped = dropped.decode() if isinstance(dropped, bytes) else str(dropped)
        loss = f["steps/loss"][...]
        steps = f["steps/step"][...]
        trace_rows = sum(f["trace"][k].shape[0] for k in f["trace"])
        # every trace row that is there is a real event (no zero rows from an unwritten extent)
        for k in f["trace"]:
            t = f["trace"][k][...]
            if len(t) and (t["end_s"] < t["start_s"]).any():
                sys.exit(f"FAIL {k}: a trace row ends before it starts (unwritten rows?)")
            if len(t) and (t["name"] == b"").any():
                sys.exit(f"FAIL {k}: a trace row without a name (unwritten rows?)")
    n = len(steps)
    if list(steps) != list(range(n)):
        sys.exit(f"FAIL /steps/step is {list(steps)}, want 0..{n - 1}")
    if any(math.isnan(x) for x in loss.ravel()):
        sys.exit("FAIL a NaN loss in the file")
    # rank 0's losses are the printed ones (printed with 4 decimals)
    for i in range(min(n, len(printed))):
        if abs(loss[0, i] - printed[i]) > 6e-5:
            sys.exit(f"FAIL step {i}: loss {loss[0, i]} in the file, {printed[i]} printed")
    if "No space left on device (ENOSPC)" not in dropped:
        sys.exit(f"FAIL trace_dropped is {dropped!r}, want the ENOSPC reason")
    if mode == "dropped":
        want = int(sys.argv[4])
        if complete != 1 or n != want:
            sys.exit(f"FAIL complete = {complete}, {n} steps; want complete = 1 and {want} steps")
    elif mode == "stopped":
        if complete != 0 or n < max(1, len(printed)) or n > len(printed) + 1:
            sys.exit(f"FAIL complete = {complete}, {n} steps ({len(printed)} printed); "
                     f"want complete = 0 and {len(printed)} or {len(printed) + 1} steps")
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"ok   {path}: complete = {complete}, {n} steps, {trace_rows} trace rows, "
          f"trace_dropped = {dropped!r}")


main()
