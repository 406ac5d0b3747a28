"""DETAILS as a person reads a call, for the table: what went in first, the
argument a reader looks at first leading (a copy's bytes and kind, an
allocation's size, the kernel's name and grid, the stream), then what the
call wrote, after an arrow, only where it wrote it:

    cudaMalloc        size=4.0 MiB → devPtr=0x7f6f52800000
    cudaMemcpy        count=4.0 MiB kind=HostToDevice dst=0x7f6f52800000 src=0x7f71…
    cudaLaunchKernel  vecAdd(float const*, …) gridDim=(4096,1,1) blockDim=(256,1,1) …
    cudaMalloc        size=4.0 MiB → InsufficientDriver     (RESULT folded, 80 columns)

The text comes from the call's DETAILS as every format writes it (`name=text`
in the function's order, decode.calls): split at its names, each part ranked
by its argument's kind (the catalogue), in order within a rank. JSONL, CSV,
JSON and Chrome keep DETAILS as decoded; only the table reads it this way.
"""

from __future__ import annotations

import functools
import re

from cudaprobe.catalogue.functions import BY_EXPORTED, OUT_KINDS, ArgKind, Function
from cudaprobe.decode.calls import NOT_READ, Call
from cudaprobe.decode.demangle import shorten
from cudaprobe.decode.handles import UNKNOWN_WHY
from cudaprobe.output.text import cells, cut_end

ARROW = " → "  # what the call wrote (or the error it returned), after it
STILL_RUNNING = " (still running when the trace ended)"  # decode.calls' ending
ERROR_KEEPS = 8  # cells an error keeps at the end of a cut DETAILS ...
INPUTS_KEEP = 16  # ... where what went in keeps these
_NAME = re.compile(r" (?=[A-Za-z_][A-Za-z0-9_]*=)")  # where a `name=` part starts

# rank of an argument's part: lower first; (launch, other call)
KERNEL, SHAPE, SIZE, KIND, VALUE, HANDLE, REST = range(7)
_KIND_RANK = {
    ArgKind.SIZE: SIZE, ArgKind.SIZE32: SIZE, ArgKind.MEMCPY_KIND: KIND,
    ArgKind.DIM3: SHAPE, ArgKind.DIM: SHAPE, ArgKind.CSTRING: SIZE,
    ArgKind.COUNT: VALUE, ArgKind.INT: VALUE, ArgKind.UINT: VALUE, ArgKind.UINT8: VALUE,
    ArgKind.UINT16: VALUE, ArgKind.ENUM: VALUE,
    ArgKind.STREAM: HANDLE, ArgKind.EVENT: HANDLE, ArgKind.HANDLE: HANDLE,
}
# parts named by no argument: a struct's fields (cuLaunchKernelEx's config),
# what NCCL's decoding adds (`bytes`)
_NAME_RANK = {"bytes": SIZE, "grid": SHAPE, "block": SHAPE, "smem": SIZE, "stream": HANDLE}
_KERNEL_KINDS = (ArgKind.FUNC, ArgKind.CU_FUNCTION)


@functools.cache  # (the catalogue's functions: a few thousand at most)
def _kinds(fn: Function) -> dict[str, ArgKind]:
    """Each part's name in DETAILS -> its argument's kind (a grid's X, Y and Z
    are one part, named by their stem)."""
    kinds = {}
    for arg in fn.args:
        name = arg.name
        if arg.kind is ArgKind.DIM and name[-1:] in "XYZ":
            name = name[:-1]
        kinds[name] = arg.kind
    return kinds


def _parts(details: str) -> list[tuple[str, str]]:
    """`name=text` parts as (name, text); a text may hold spaces (`4.0 MiB`,
    a kernel's name). What is before the first name is a part of no name."""
    parts = []
    for piece in _NAME.split(details):
        name, eq, text = piece.partition("=")
        parts.append((name, text) if eq and name.isidentifier() else ("", piece))
    return parts


def reading(c: Call, result: str = "", kernel_room: int | None = None) -> str:
    """The call's DETAILS in the order a person reads it; `result` (an
    error's short name, `in flight`) after the arrow in place of what the
    call wrote. `kernel_room`: the cells a kernel's name may take (its
    parameters, then its template arguments, go first)."""
    details = c.details
    if details.endswith(STILL_RUNNING):
        details = details[: -len(STILL_RUNNING)]
    fn = BY_EXPORTED.get(c.event.strip())
    if fn is None or not details:
        return f"{details}{ARROW}{result}" if result and details else details or result
    kinds = _kinds(fn)
    launch = any(a.kind in _KERNEL_KINDS for a in fn.args) or "grid" in details
    ranked: list[tuple[int, int, str]] = []
    written = []
    for i, (name, text) in enumerate(_parts(details)):
        kind = kinds.get(name)
        if kind in OUT_KINDS:
            if text != NOT_READ[1]:
                written.append(f"{name}={text}")
            continue
        part = f"{name}={text}" if name else text
        if kind in _KERNEL_KINDS and " " in text and not text.endswith(f" ({UNKNOWN_WHY})"):
            address, kernel = text.split(" ", 1)  # named: the name first, its address last
            if kernel_room is not None:
                kernel = kernel_label(kernel, kernel_room)
            ranked.append((KERNEL, i, kernel))
            part = f"{name}={address}"
            rank = REST
        elif kind in _KERNEL_KINDS:  # not named: its address (and why) says which kernel
            rank = KERNEL
        elif kind is not None:
            rank = _KIND_RANK.get(kind, REST)
        else:
            rank = _NAME_RANK.get(name, REST)
        if not launch and rank == SHAPE:
            rank = VALUE
        if launch and rank == SIZE:  # a launch's shared memory after its shape
            rank = HANDLE
        ranked.append((rank, i, part))
    text = " ".join(part for _, _, part in sorted(ranked))
    after = result or " ".join(written)
    return f"{text}{ARROW}{after}" if after and text else (after or text)


def kernel_label(name: str, room: int) -> str:
    """A kernel's demangled name in about `room` cells: without its parameters
    and return type, then template arguments, then namespaces
    (`at::native::vectorized_elementwise_kernel<…>` is
    `vectorized_elementwise_kernel<…>`)."""
    short = shorten(name, room)
    if cells(short) <= room:
        return short
    stem, angle, rest = short.partition("<")
    if "::" in stem:
        short = stem.rsplit("::", 1)[1] + angle + rest
    return short


def fit_reading(text: str, result: str, extra: str, width: int) -> str:
    """`text` (from `reading`, `result` at its end) and then `extra` (folded
    columns) in `width` cells: the extra gives first, then what went in, down
    to INPUTS_KEEP cells, so that the result stays in sight."""
    whole = text + extra
    if cells(whole) <= width:
        return whole
    if cells(text) <= width:  # the extra is whole or not at all
        return text
    if not result or not text.endswith(ARROW + result):
        return cut_end(text, width)
    tail = ARROW + result
    head = text[: len(text) - len(tail)]
    first = _NAME.split(head, 1)[0]  # the first argument, whole where the arrow still shows
    room = min(max(width - cells(tail), min(cells(head), INPUTS_KEEP)),
               width - len(ARROW) - ERROR_KEEPS)
    if room <= cells(first) < width - len(ARROW) - 3:
        room = cells(first) + 1
    if room < min(cells(head), INPUTS_KEEP // 2):
        return cut_end(text, width)
    cut = cut_end(head, room)
    if cut != head:  # at the end of a whole argument, where one ends late enough
        ends = [m.start() for m in _NAME.finditer(head)
                if room // 2 <= cells(head[: m.start()]) < room]
        if ends:
            cut = head[: ends[-1]] + "…"
    return cut + cut_end(tail, width - cells(cut))
