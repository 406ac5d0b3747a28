"""Compiling, attaching and reading the BPF program; the one place bcc is used.

bcc raises bare `Exception`s; they are translated into BpfError here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from typing import Any

from . import bpfprog
from .errors import BccMissing, BpfError, NotRoot
from .event import (
    EVENT_SIZE,
    LOST_PAIRING,
    LOST_RINGBUF,
    NR_COUNTERS,
    WAKEUPS,
    RawEvent,
    unpack_event,
)
from .probes import ProbePlan


def import_bcc() -> Any:
    try:
        import bcc  # noqa: PLC0415 - imported at run time: not on PyPI
    except ImportError as e:
        raise BccMissing(str(e)) from None
    return bcc


class Tracer:
    """Owns the BPF object: `with Tracer(plan, settings) as t: t.poll(...)`."""

    def __init__(self, plan: ProbePlan, settings: bpfprog.Settings) -> None:
        self.plan = plan
        self.settings = settings
        self._bpf: Any = None
        self._pending: list[bytes] = []
        self.malformed = 0  # events of the wrong size (userspace loss)
        self.attached: list[str] = []  # "symbol@path" of attached probes
        self.attach_seconds = 0.0

    def __enter__(self) -> Tracer:
        if os.geteuid() != 0:
            raise NotRoot()
        bcc = import_bcc()
        try:
            self._bpf = bcc.BPF(
                src_file=bpfprog.source_path().encode(),
                cflags=bpfprog.cflags(self.plan.probes, self.settings),
            )
        except Exception as e:  # bcc: compile errors are printed above by clang
            raise BpfError("compiling the BPF program failed", str(e),
                           fix="run `cudaprobe doctor`") from None
        try:
            self._attach_all()
            self._bpf["events"].open_ring_buffer(self._on_event)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach_all(self) -> None:
        start = time.monotonic()
        for a in self.plan.attachments:
            for kind, fn in (("uprobe", f"cp_enter_{a.probe.func_id}"),
                             ("uretprobe", f"cp_return_{a.probe.func_id}")):
                attach = getattr(self._bpf, f"attach_{kind}")
                try:
                    attach(name=a.path.encode(), addr=a.address, fn_name=fn.encode())
                except Exception as e:
                    raise BpfError(f"attaching {kind} to {a.probe.symbol} in {a.path}",
                                   str(e)) from None
            self.attached.append(f"{a.probe.symbol}@{a.path}")
        self.attach_seconds = time.monotonic() - start

    def close(self) -> None:
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            with contextlib.suppress(Exception):
                bpf.cleanup()

    def add_target(self, pid: int) -> None:
        """Trace this process (and, through the fork tracepoint, its children)."""
        targets = self._bpf["targets"]
        targets[targets.Key(pid)] = targets.Leaf(1)

    def _on_event(self, _ctx: Any, data: Any, size: int) -> int:
        self._pending.append(ctypes.string_at(data, size))
        return 0

    def _take(self) -> list[RawEvent]:
        pending, self._pending = self._pending, []
        out = []
        for data in pending:
            if len(data) != EVENT_SIZE:
                self.malformed += 1
                continue
            out.append(unpack_event(data))
        return out

    def poll(self, timeout_ms: int) -> list[RawEvent]:
        """Wait up to timeout_ms for a forced wakeup, then drain the ring buffer."""
        self._bpf.ring_buffer_poll(timeout_ms)
        self._bpf.ring_buffer_consume()
        return self._take()

    def drain(self) -> list[RawEvent]:
        self._bpf.ring_buffer_consume()
        return self._take()

    def in_flight(self) -> list[RawEvent]:
        """Calls entered but not returned: read from the pairing map."""
        table = self._bpf["inflight"]
        return [unpack_event(bytes(v)) for _k, v in table.items()]

    def counters(self) -> dict[str, int]:
        table = self._bpf["counters"]
        totals = [sum(table[table.Key(i)]) for i in range(NR_COUNTERS)]
        return {
            "ringbuf_full": totals[LOST_RINGBUF],
            "pairing_map_full": totals[LOST_PAIRING],
            "wakeups": totals[WAKEUPS],
            "malformed": self.malformed,
        }
