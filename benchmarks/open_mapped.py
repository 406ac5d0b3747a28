"""Opening what a process maps, the safe way, against a stat by name: each
executable mapping of a running process (pid as the argument) opened through
/proc/PID/map_files, fstat-ed and checked against its maps line (what cudaprobe
does once per file), and, in the same run, os.stat of the name (the check it
made before). Run as root: .venv/bin/python benchmarks/open_mapped.py PID
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from cudaprobe.targets.openfile import Mapped, open_mapped
from cudaprobe.targets.procmaps import MapLine, map_lines

ROUNDS = 200


def through_mapping(pid: int, lines: list[MapLine]) -> float:
    t = time.perf_counter()
    for m in lines:
        open_mapped(Mapped(pid, m.start, m.end, m.major, m.minor, m.inode, m.path,
                           m.path)).close()
    return time.perf_counter() - t


def stat_by_name(lines: list[MapLine]) -> float:
    t = time.perf_counter()
    for m in lines:
        os.stat(m.path)
    return time.perf_counter() - t


def main() -> None:
    pid = int(sys.argv[1])
    lines = [m for m in map_lines(pid) if m.is_file and "x" in m.perms]
    mapped = statistics.median(through_mapping(pid, lines) for _ in range(ROUNDS))
    named = statistics.median(stat_by_name(lines) for _ in range(ROUNDS))
    print(f"{len(lines)} executable mappings; through the mapping (open, fstat, check): "
          f"{mapped / len(lines) * 1e6:.1f} us a file; os.stat by name (the old check): "
          f"{named / len(lines) * 1e6:.1f} us a file")


if __name__ == "__main__":
    main()
