"""`stats --by line`: the calls per Python line (--py-stacks), and with
--gpu-time the GPU work they queued, per line: the work of PyTorch's
backward pass on the line of the forward op it differentiates (a row's
`backward` share), where that line is known (decode/pystacks.py).

A call's line is the innermost frame of its stack that is the user's own:
outside site-packages, dist-packages and the standard library (files under
a lib/pythonX.Y directory, and the interpreter's frozen modules); where every
frame is one of those, the innermost frame.
"""

from __future__ import annotations

import re
from typing import Any

from cudaprobe.analysis.gpustats import GpuRow, GpuStats
from cudaprobe.decode.calls import Call
from cudaprobe.decode.demangle import demangle
from cudaprobe.decode.pystacks import LENDERS_MANY, PyStack

NOT_USERS = re.compile(r"/(site|dist)-packages/|/lib/python\d\.\d+/|^<")
NO_PYTHON = "(no Python frame)"
# a thread with no Python frame while several Python threads waited in C calls
NO_LENDER = "(no Python frame: several Python threads waited, none handed the work over)"


def user_frame(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost frame outside libraries and the standard library, or the
    innermost frame where all are; None for no frames."""
    for f in frames:
        if not NOT_USERS.search(f["file"]):
            return f
    return frames[0] if frames else None


def frame_text(f: dict[str, Any]) -> str:
    return f"{f['file']}:{f['line'] if f['line'] is not None else '?'}"


def python_line(stack: PyStack | None) -> str:
    """`file:line (function)` of a stack's user frame (NO_PYTHON: no stack; a
    stack not read says why)."""
    if stack is not None and stack.missing == LENDERS_MANY:
        return NO_LENDER
    if stack is not None and stack.missing is not None:
        return f"(Python stack not read: {stack.missing})"
    f = user_frame(stack.frames) if stack is not None else None
    return f"{frame_text(f)} ({f['function']})" if f is not None else NO_PYTHON


def line_of(call: Call) -> str:
    """The row a call counts in: its user frame's `file:line (function)`."""
    return python_line(call.py_stack)


def gpu_line_of(call: Call) -> tuple[str, bool]:
    """The row a call's GPU work counts in, and whether it is backward work: the
    forward op's line for a call of PyTorch's backward pass whose forward is
    known, else the call's own line."""
    stack = call.py_stack
    if stack is not None and stack.forward:
        f = user_frame(stack.forward)
        if f is not None:
            return f"{frame_text(f)} ({f['function']})", True
    return python_line(stack), False


class GpuByLine:
    """The GPU time of each line's launches (kernels), and copies and memsets."""

    def __init__(self) -> None:
        self._rows: tuple[dict[str, GpuRow], dict[str, GpuRow]] = ({}, {})

    def add(self, calls: list[Call]) -> None:
        for c in calls:
            if not c.gpu:
                continue
            name, backward = gpu_line_of(c)
            for w in c.gpu:
                rows = self._rows[w.kind != "kernel"]
                row = rows.get(name) or rows.setdefault(name, GpuRow(name))
                row.durations.append(w.duration_ns)
                row.bytes += w.bytes
                if backward:
                    row.backward_ns += w.duration_ns

    def stats(self, dropped: int = 0) -> GpuStats:
        def by_total(rows: dict[str, GpuRow]) -> list[GpuRow]:
            for row in rows.values():
                row.durations.sort()
            return sorted(rows.values(), key=lambda r: (-r.total_ns, r.name))
        return GpuStats(by_total(self._rows[0]), by_total(self._rows[1]), dropped, per="line")


UNSAFE = re.compile(r"[;\x00-\x1f\x7f]")  # folded stacks' separators and control bytes


class FoldedStacks:
    """Python stacks weighted by the GPU time (ns) of the work their calls
    queued, as folded stacks (flamegraph.pl, speedscope): the frames from the
    outermost, then the kernel (or copy); PyTorch's backward work under the
    stack of its forward op, after a `[backward]` frame. A call with no Python
    stack is under `(no Python frame)`. Names come from the traced process:
    separators and control bytes in them become `?`."""

    def __init__(self) -> None:
        self._ns: dict[str, int] = {}

    def add(self, calls: list[Call]) -> None:
        for c in calls:
            if not c.gpu:
                continue
            stack, backward = c.py_stack, False
            frames = stack.frames if stack is not None and stack.missing is None else []
            if stack is not None and stack.forward:
                frames, backward = stack.forward, True
            path = [f"{f['function']} ({frame_text(f)})" for f in reversed(frames)] \
                or [NO_PYTHON]
            if backward:
                path.append("[backward]")
            for w in c.gpu:
                work = (demangle(w.name) if w.name else "(kernel unnamed)") \
                    if w.kind == "kernel" else f"[{w.kind} {w.name}]".replace(" ]", "]")
                key = ";".join(UNSAFE.sub("?", p) for p in (*path, work))
                self._ns[key] = self._ns.get(key, 0) + w.duration_ns

    def lines(self) -> list[str]:
        return [f"{key} {ns}\n" for key, ns in sorted(self._ns.items()) if ns > 0]
