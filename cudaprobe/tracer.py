"""Compiling, attaching and reading the BPF program; the one place bcc is used.

bcc raises bare `Exception`s; they are translated into BpfError here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from typing import Any

from . import bpfprog, uprobe_multi
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
        self.attached: list[str] = []  # library paths probed
        self.attach_seconds = 0.0
        self._links: list[int] = []  # uprobe_multi link fds

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
        probes = self._bpf["probes"]
        for p in self.plan.probes:
            probes[probes.Key(p.func_id)] = probes.Leaf(*bpfprog.probe_config(p))
        if self.settings.attach == "multi":
            self._attach_multi()
        else:
            self._attach_perf()
        self.attached = sorted({a.path for a in self.plan.attachments})
        self.attach_seconds = time.monotonic() - start

    def _attach_multi(self) -> None:
        kprobe = self._bpf.KPROBE
        by_path: dict[str, list] = {}
        for a in self.plan.attachments:
            by_path.setdefault(a.path, []).append(a)
        for fn_name, retprobe in ((b"cp_enter", False), (b"cp_return", True)):
            try:
                fn = self._bpf.load_func(fn_name, kprobe,
                                         attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
            except Exception as e:
                raise BpfError("loading the BPF program failed", str(e)) from None
            for path, atts in by_path.items():
                try:
                    fd = uprobe_multi.create_link(fn.fd, path, [a.offset for a in atts],
                                                  [a.probe.func_id for a in atts], retprobe)
                except OSError as e:
                    raise BpfError(f"attaching {len(atts)} uprobes to {path}", e.strerror,
                                   fix="set CUDAPROBE_ATTACH=perf on kernels without "
                                       "uprobe_multi") from None
                self._links.append(fd)

    def _attach_perf(self) -> None:
        for a in self.plan.attachments:
            addr = a.offset if a.is_pie_or_shared else a.vaddr
            for kind, fn in (("uprobe", f"cp_enter_{a.probe.func_id}"),
                             ("uretprobe", f"cp_return_{a.probe.func_id}")):
                attach = getattr(self._bpf, f"attach_{kind}")
                try:
                    attach(name=a.path.encode(), addr=addr, fn_name=fn.encode())
                except Exception as e:
                    raise BpfError(f"attaching {kind} to {a.probe.symbol} in {a.path}",
                                   str(e)) from None

    def close(self) -> None:
        """Detach everything; safe to call twice."""
        links, self._links = self._links, []
        for fd in links:
            with contextlib.suppress(OSError):
                os.close(fd)
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
