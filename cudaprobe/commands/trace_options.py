"""trace's options for output files and loss: --strict, --max-size, --mode, and
--ringbuf-pages; with the checks for options that conflict."""

from __future__ import annotations

import re
from typing import Callable

import click

from cudaprobe.errors import UsageError
from cudaprobe.sessions.tracing import STRICT_EXIT

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class ByteSize(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        m = re.fullmatch(r"(\d+)\s*([KMG]?)(?:i?B)?", str(value).strip(), re.I)
        if not m or int(m.group(1)) == 0:
            self.fail(f"{value!r} is not a size such as 500K, 100M or 2G", param, ctx)
        return int(m.group(1)) * _UNITS[m.group(2).upper()]


class FileMode(click.ParamType):
    name = "mode"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        if not re.fullmatch(r"0?[0-7]{3}", str(value)):
            self.fail(f"{value!r} is not an octal file mode such as 0640", param, ctx)
        return int(value, 8)


# 2 GiB: the ring's size in bytes is a 32-bit number for the BPF compiler and
# the kernel; 4 GiB overflowed it into clang warnings and a failed compile
MAX_RINGBUF_PAGES = 1 << 19


class PowerOfTwo(click.ParamType):
    name = "pages"

    def convert(self, value, param, ctx) -> int:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1 or n & (n - 1):
            self.fail(f"{value!r} is not a power of two (the kernel's rule for ring "
                      "buffer sizes)", param, ctx)
        if n > MAX_RINGBUF_PAGES:
            self.fail(f"{value!r} is more than {MAX_RINGBUF_PAGES} pages (2 GiB, the largest "
                      "ring buffer)", param, ctx)
        return n


def output_options(f: Callable) -> Callable:
    for option in reversed([
        click.option("--mode", type=FileMode(), metavar="OCTAL",
                     help="Permissions of the -o FILE.  [default: 0600]"),
        click.option("--max-size", type=ByteSize(), metavar="SIZE",
                     help="Stop writing calls to the -o FILE once it holds SIZE (500K, 100M, "
                          "2G); further calls are counted as lost, the summary still written."),
        click.option("--strict", is_flag=True,
                     help=f"Exit {STRICT_EXIT} if any event was lost (ring buffer full, "
                          "pairing map full, --max-size reached, ...)."),
        click.option("--ringbuf-pages", type=PowerOfTwo(), metavar="PAGES",
                     help="Size of the ring buffer between the probes and cudaprobe, in 4 KiB "
                          "pages, a power of two; kernel memory, ~96 bytes a call. A bigger "
                          "ring absorbs longer bursts.  [default: 4096 (16 MiB)]"),
    ]):
        f = option(f)
    return f


def check_conflicts(output: str | None, dump_bpf: bool, **given: object) -> None:
    """Options that need -o FILE, and options --dump-bpf makes meaningless.
    `given`: option name (as typed, without --) -> its value."""
    to_file = bool(output) and output != "-"
    for name in ("force", "mode", "max-size"):
        if given.get(name) not in (None, False) and not to_file:
            raise UsageError(f"--{name} goes with -o FILE")
    if dump_bpf:
        for name in ("output", "duration", "strict", "force", "mode", "max-size"):
            if given.get(name) not in (None, False) or (name == "output" and output):
                raise UsageError(f"--dump-bpf prints the BPF program and exits: leave out "
                                 f"--{name}")
