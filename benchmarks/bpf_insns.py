"""The entry and exit programs as compiled, instruction by instruction, beside
another source tree's (root: bcc loads the maps).

A change to the BPF C that should not change what runs per call (moving code
between files, renaming, a struct field's place) can be checked exactly: the
same number of instructions, each with the same opcode and registers (offsets
and immediates are left out: map fds and field offsets differ between two
loads). Timings then only confirm it, within their noise.

    python3 benchmarks/bpf_insns.py [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# (name, Settings keywords): the programs a user gets most
CASES = [("trace", {}), ("trace --errors-only --pid", {"errors_only": True, "filter_pid": True}),
         ("trace (memory: callers, stacks)", {"callers": True, "stacks": True}),
         ("stats", {"stats": True})]
PROGRAMS = ("cp_enter", "cp_return")


def compile_text(bpfprog, settings) -> str:  # noqa: ANN001 - this tree's or another's module
    """The program's text as this tree's loader gives it to bcc."""
    if hasattr(bpfprog, "source"):
        return bpfprog.source(settings)
    if hasattr(bpfprog, "source_text"):
        return bpfprog.source_text()
    return Path(bpfprog.source_path()).read_text()


def dump() -> dict[str, list[str]]:
    """case/program -> each instruction's opcode and registers, in hex."""
    from cudaprobe.catalogue import functions as catalogue  # noqa: PLC0415 - the tree's own
    from cudaprobe.probe import bpfprog  # noqa: PLC0415
    from cudaprobe.probe.plan import Probe  # noqa: PLC0415
    try:
        from cudaprobe.probe.load import import_bcc  # noqa: PLC0415
    except ImportError:
        from cudaprobe.probe.tracer import import_bcc  # noqa: PLC0415
    bcc = import_bcc()
    probes = [Probe(0, "cudaMalloc", catalogue.BY_NAME["cudaMalloc"])]
    out = {}
    for name, kw in CASES:
        settings = bpfprog.Settings(attach="multi", **kw)
        cflags = [f for f in bpfprog.cflags(probes, settings) if not f.startswith("-I")]
        b = bcc.BPF(text=compile_text(bpfprog, settings).encode(),
                    cflags=[f"-I{bpfprog.bpf_dir()}", *cflags])
        for prog in PROGRAMS:
            code = b.dump_func(prog.encode())
            out[f"{name}: {prog}"] = [code[i:i + 2].hex() for i in range(0, len(code), 8)]
        b.cleanup()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", metavar="DIR", help="another source tree to compare with")
    ap.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bpf_insns: needs root", file=sys.stderr)
        return 2
    if args.dump:
        json.dump(dump(), sys.stdout)
        return 0
    here = dump()
    base = None
    if args.baseline:  # run from that tree: `python FILE` imports from its cwd first
        p = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.path.insert(0, '.'); "
                            f"sys.argv = ['bpf_insns', '--dump']; runpy.run_path({__file__!r}, "
                            "run_name='__main__')"], cwd=args.baseline, capture_output=True,
                           text=True, check=True)
        base = json.loads(p.stdout)
    for key, insns in here.items():
        line = f"{key:<45} {len(insns):>5} instructions"
        if base is not None:
            other = base[key]
            differ = sum(a != b for a, b in zip(insns, other)) + abs(len(insns) - len(other))
            line += f"; baseline {len(other):>5}, {differ} differ in opcode or registers"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
