"""Symbol reading on big objects: cudaprobe's struct reader vs pyelftools and nm.

Usage: python benchmarks/symbols.py [ELF ...] [--generate N]
  --generate N  also build a shared object of N functions with long C++-style
                mangled names (written as assembly, so it builds in seconds),
                a stand-in for libtorch_cuda.so's ~207k symbols

For each object: the first read (file in the page cache, no cudaprobe cache),
the mean of 10,000 lookups of random addresses after it, a load from the
build-id cache (targets/symcache.py), pyelftools' per-symbol read and `nm`.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from elftools.elf.elffile import ELFFile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cudaprobe.targets import symcache  # noqa: E402
from cudaprobe.targets.elfsyms import _read_symbols, read_symbols  # noqa: E402


def generate(n: int, out: Path) -> Path:
    """A shared object of n one-instruction functions named like template kernels."""
    asm = out.with_suffix(".s")
    with open(asm, "w") as f:
        f.write(".text\n")
        for i in range(n):
            name = (f"_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_{i}_GLOBAL__N__"
                    f"d2ba64fb_{i:07d}_binary_op_kernelERNS_18TensorIteratorBaseEENKUlvE_clEv"
                    f"ENKUlvE0_clEvEUlffE_NS_6detail5ArrayIPcLi3EEEEEviT0_T1_")
            f.write(f".globl {name}\n.type {name},@function\n{name}:\n\tret\n"
                    f".size {name},1\n")
    subprocess.run(["gcc", "-shared", "-Wl,--build-id", "-o", str(out), str(asm)], check=True)
    asm.unlink()
    return out


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def pyelftools_read(path: str) -> int:
    n = 0
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for name in (".dynsym", ".symtab"):
            section = elf.get_section_by_name(name)
            for sym in section.iter_symbols() if section is not None else ():
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                    n += len(sym.name)
    return n


def measure(path: str, cache: Path) -> None:
    os.environ["CUDAPROBE_CACHE_DIR"] = str(cache)
    Path(path).read_bytes()  # into the page cache: every reader then starts alike
    _read_symbols.cache_clear()
    first, table = timed(lambda: read_symbols(path))
    addresses = [a + 1 for a in random.Random(0).choices(table.starts, k=10_000)]
    lookups, _ = timed(lambda: [table.function_at(a) for a in addresses])
    symcache.save(table)
    cached, kept = timed(lambda: symcache.load(table.build_id)) if table.build_id else (0, None)
    elftools, _ = timed(lambda: pyelftools_read(path))
    nm, _ = timed(lambda: subprocess.run(["nm", "-C", path], capture_output=True, check=False))
    size = os.path.getsize(path) / 2**20
    print(f"{Path(path).name}: {size:.0f} MiB, {len(table.starts)} functions "
          f"({len(table.vaddrs)} names)")
    print(f"  cudaprobe first read   {first:7.3f} s")
    print(f"  each later lookup      {lookups / len(addresses) * 1e6:7.2f} µs")
    if kept is not None:
        print(f"  build-id cache load    {cached:7.3f} s")
    print(f"  pyelftools             {elftools:7.3f} s")
    print(f"  nm -C                  {nm:7.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("objects", nargs="*")
    parser.add_argument("--generate", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        objects = list(args.objects)
        if args.generate:
            objects.append(str(generate(args.generate, Path(tmp) / "libgenerated.so")))
        if not shutil.which("nm"):
            sys.exit("nm not found (binutils)")
        for path in objects:
            measure(path, Path(tmp) / "cache")


if __name__ == "__main__":
    main()
