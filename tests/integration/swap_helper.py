"""Runs cudaprobe with a traced process's name swapped under it at one chosen
step of the attach, deterministically: the step is reached through the real
code, which is wrapped here to run the attacker's command there, once, and
wait for it. The command runs as whoever the test says (setpriv argv).

Usage: python swap_helper.py STEP SWAP_ARGV_JSON -- CUDAPROBE_ARGS...
Steps (see STEPS): after the maps were read, after a file was judged to hold
CUDA, after its symbols were read, just before the first probe is attached;
for --gpu-time, after the CUDA libraries of the process were found for the
safe-point probes, which are on for a few seconds only: with VICTIM_PID and
VICTIM_LIB set, the victim's code is read while they are on, and printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cudaprobe.probe.attach as attach
import cudaprobe.probe.plan as plan
import cudaprobe.sessions.gputime_inject as gi
import cudaprobe.targets.selection as selection
from cudaprobe.cli import main
from cudaprobe.targets.elfsyms import read_symbols

PROBED = ("cudaMalloc", "cudaFree")


def code_in_memory(pid: int, library: Path) -> dict[str, list[str]]:
    """The first 16 bytes of each of PROBED in `library` as process `pid` runs
    them (its memory), and as the file holds them, in hex."""
    offsets = read_symbols(str(library)).functions
    lines = [line.split() for line in Path(f"/proc/{pid}/maps").read_text().splitlines()]
    out = {}
    with open(f"/proc/{pid}/mem", "rb") as mem, open(library, "rb") as f:
        for symbol in PROBED:
            offset = offsets[symbol]
            for fields in lines:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                at = int(fields[2], 16)
                if len(fields) == 6 and fields[5] == str(library) \
                        and at <= offset < at + end - start:
                    mem.seek(start + offset - at)
                    f.seek(offset)
                    out[symbol] = [mem.read(16).hex(), f.read(16).hex()]
                    break
            else:
                raise AssertionError(f"{symbol} of {library} is not mapped by {pid}")
    return out


def report_victim_at_the_safe_point() -> None:
    original = gi.SafePoint.__enter__

    def entered(self: gi.SafePoint) -> gi.SafePoint:
        point = original(self)
        code = code_in_memory(int(os.environ["VICTIM_PID"]), Path(os.environ["VICTIM_LIB"]))
        print(f"swap_helper: victim code {json.dumps(code)} with {point.probes} probes on",
              file=sys.stderr, flush=True)
        return point
    gi.SafePoint.__enter__ = entered  # type: ignore[method-assign]

SWAP: list[str] = []
DONE: list[bool] = []


def swap() -> None:
    if not DONE:
        DONE.append(True)
        subprocess.run(SWAP, check=True)
        print(f"swap_helper: swapped at {sys.argv[1]}", file=sys.stderr, flush=True)


def after(owner: object, name: str) -> None:
    original = getattr(owner, name)

    def wrapped(*args: object, **kw: object) -> object:
        result = original(*args, **kw)
        swap()
        return result
    setattr(owner, name, wrapped)


def before(owner: object, name: str) -> None:
    original = getattr(owner, name)

    def wrapped(*args: object, **kw: object) -> object:
        swap()
        return original(*args, **kw)
    setattr(owner, name, wrapped)


STEPS = {
    "maps": lambda: after(selection, "read_maps"),
    "judged": lambda: after(selection, "defines_any"),
    "symbols": lambda: after(plan, "read_symbols"),
    "attach": lambda: (before(attach.uprobe_multi, "create_link"),
                       before(attach.perf_uprobe, "attach")),
    "safepoint": lambda: (after(gi, "cuda_view"), report_victim_at_the_safe_point()),
}

if __name__ == "__main__":
    step, SWAP[:] = sys.argv[1], json.loads(sys.argv[2])
    assert sys.argv[3] == "--"
    STEPS[step]()
    main(args=sys.argv[4:], prog_name="cudaprobe")
