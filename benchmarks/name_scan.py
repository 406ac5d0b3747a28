"""Finding CUDA in a process: the quick look (elfsyms.defines_any) at each
object a process maps, timed per object, with the names as cudaprobe has them
(one trie-shaped expression per first two bytes, each led by them as a
literal: `prefixed_s`) beside one trie-shaped expression led by a lookahead
(`trie_s`, before) and, with --flat, one flat alternative per name (before that).

Usage: python benchmarks/name_scan.py [ELF ...] [--flat]
  With no ELF, every object the interpreter running it maps and those under
  $CUDA_HOME/lib64. --flat also times the flat expression (slow on big ones).

Prints one JSON line per object (size, seconds each way, the verdict) and a
total line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cudaprobe.catalogue.functions import FUNCTIONS  # noqa: E402
from cudaprobe.targets import elfsyms  # noqa: E402
from cudaprobe.targets.procmaps import read_maps  # noqa: E402


class OnePattern:
    """One expression, with NamePattern's starts()."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern

    def starts(self, data: bytes, begin: int, end: int) -> set[int]:
        return {m.start() - begin for m in self.pattern.finditer(data, begin, end)}


def flat_pattern(names: list[str]) -> OnePattern:
    """One alternative per name, longest first: the expression before the trie."""
    alternatives = b"|".join(re.escape(n.encode()) for n in sorted(names, key=len, reverse=True))
    return OnePattern(re.compile(b"(?:" + alternatives + b")\0"))


def trie_pattern(names: list[str]) -> OnePattern:
    """The names as one trie behind a lookahead: the expression before the prefixed ones."""
    trie: dict = {}
    for name in names:
        node = trie
        for byte in name.encode():
            node = node.setdefault(byte, {})
        node[None] = {}
    return OnePattern(re.compile(b"(?=" + elfsyms._alternatives(trie) + b"\0)"))


def timed(path: str, pattern: elfsyms.NamePattern | OnePattern) -> tuple[float, bool]:
    start = time.perf_counter()
    verdict = elfsyms.defines_any(path, pattern)
    return time.perf_counter() - start, verdict


def objects(paths: list[str]) -> list[str]:
    if paths:
        return paths
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64"
    mapped = {f.host_path for f in read_maps(os.getpid())}
    return sorted(mapped | {str(p) for p in cuda.glob("*.so*") if not p.is_symlink()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("elf", nargs="*")
    ap.add_argument("--flat", action="store_true")
    args = ap.parse_args()
    names = sorted({s for f in FUNCTIONS for s in f.symbols})
    prefixed, trie, flat = elfsyms.name_pattern(names), trie_pattern(names), flat_pattern(names)
    totals = {"objects": 0, "prefixed_s": 0.0, "trie_s": 0.0, "flat_s": 0.0}
    for path in objects(args.elf):
        row: dict = {"object": path, "mb": round(os.path.getsize(path) / 1e6, 1)}
        row["prefixed_s"], row["defines"] = timed(path, prefixed)
        row["trie_s"], same = timed(path, trie)
        assert same == row["defines"], path
        totals["prefixed_s"] += row["prefixed_s"]
        if args.flat:
            row["flat_s"], same = timed(path, flat)
            assert same == row["defines"], path
            totals["flat_s"] += row["flat_s"]
        totals["objects"] += 1
        totals["trie_s"] += row["trie_s"]
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}),
              flush=True)
    print(json.dumps({"names": len(names), **{k: round(v, 3) if isinstance(v, float) else v
                                              for k, v in totals.items()}}))


if __name__ == "__main__":
    main()
