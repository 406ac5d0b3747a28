"""Runs cudaprobe with a traced process's name swapped under it at one chosen
step of the attach, deterministically: the step is reached through the real
code, which is wrapped here to run the attacker's command there, once, and
wait for it. The command runs as whoever the test says (setpriv argv).

Usage: python swap_helper.py STEP SWAP_ARGV_JSON -- CUDAPROBE_ARGS...
Steps (see STEPS): after the maps were read, after a file was judged to hold
CUDA, after its symbols were read, just before the first probe is attached.
"""

from __future__ import annotations

import json
import subprocess
import sys

import cudaprobe.probe.attach as attach
import cudaprobe.probe.plan as plan
import cudaprobe.targets.selection as selection
from cudaprobe.cli import main

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
}

if __name__ == "__main__":
    step, SWAP[:] = sys.argv[1], json.loads(sys.argv[2])
    assert sys.argv[3] == "--"
    STEPS[step]()
    main(args=sys.argv[4:], prog_name="cudaprobe")
