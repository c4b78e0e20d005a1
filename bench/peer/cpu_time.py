#!/usr/bin/python3
"""Run a command and write the CPU seconds of it and every process it waited for (all ranks of
an mpiexec or torch.multiprocessing.spawn job) to a JSON file: {"user_s", "sys_s", "wall_s"}.

  /usr/bin/python3 bench/peer/cpu_time.py OUT.json -- mpiexec -n 2 hlp-train ...
Exit code: the command's. On a shared, oversubscribed machine wall time depends on the other
load; CPU seconds much less so (but they include start-up and any busy-polling while waiting).
"""
import json
import resource
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: cpu_time.py OUT.json -- COMMAND [ARGS...]")
    t0 = time.perf_counter()
    rc = subprocess.call(sys.argv[3:])
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(sys.argv[1], "w") as f:
        json.dump({"user_s": ru.ru_utime, "sys_s": ru.ru_stime, "wall_s": wall,
                   "command": sys.argv[3:]}, f, indent=1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
