"""A memory session: trace the memory functions of both APIs, name each call's
call site while its process runs, feed the accounting, and report each
process's leaks when it exits.

A process's exit is noticed between polls: the pids that are gone are taken
with the ring's position then (RingBuffer.produced), and their leftovers are
declared leaked only once the records have been read up to it: every event
they sent is in by then, however far the reader and the decoder are behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from cudaprobe.analysis.by_line import python_line
from cudaprobe.analysis.memtrack import MemCall, MemoryAccounting, ProcessMemory
from cudaprobe.decode.calls import decode_event
from cudaprobe.decode.callsites import CallSites
from cudaprobe.decode.pystacks import PyStacks
from cudaprobe.decode.schema import time_ms
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.event import RawEvent, from_record, site_frame
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.run import POLL_MS, ProbeRun, RunOptions
from cudaprobe.targets.procmaps import process_alive


@dataclass
class MemoryOptions(RunOptions):
    interval: float | None = None  # show live bytes this often
    stacks: bool = False


class MemorySession:
    def __init__(self, plan: ProbePlan, settings: Settings, options: MemoryOptions,
                 on_exit: Callable[[ProcessMemory], None],
                 on_interval: Callable[[MemorySession], None]) -> None:
        self.plan = plan
        self.settings = settings
        self.options = options
        self.on_exit = on_exit  # a process exited: its leak report
        self.on_interval = on_interval
        self.accounting = MemoryAccounting()
        # the objects of a process that exits before its maps are read: found by build-id
        self.sites = CallSites.for_session(options.command, [a.file for a in plan.attachments])
        self.lost: dict[str, int] = {}
        self.in_flight = 0
        self.decode_errors = 0
        self.duration_s = 0.0
        self.libraries: list[str] = []
        self.t0_ns = 0
        self.py_stacks: PyStacks | None = None  # --py-stacks: each call's Python stack
        # processes seen gone, each with the ring's position then: their exit is
        # applied once the records are read up to it
        self._gone_at: dict[int, int] = {}

    def run(self) -> int:
        """Trace until stopped; returns the exit status for cudaprobe."""
        with ProbeRun(self.plan, self.settings, self.options) as run:
            self.t0_ns = run.t0_ns
            if run.tracer.py is not None:  # read before the first poll: none missed
                self.py_stacks = PyStacks(run.tracer.py.layouts)
                run.tracer.ring.on_side = self.py_stacks.add
            next_report = time.monotonic() + (self.options.interval or 0)
            while run.running():
                self._step(run.tracer, POLL_MS)
                if self.options.interval and time.monotonic() >= next_report:
                    next_report += self.options.interval
                    self.on_interval(self)
            run.finish(lambda timeout_ms: self._step(run.tracer, timeout_ms))
            self.in_flight = run.tracer.pairing.in_flight_count()
            self.lost = {k: v for k, v in run.tracer.counters().items() if k != "wakeups"}
            self.lost["decode_errors"] = self.decode_errors
            self.duration_s = run.traced_s
            self.libraries = run.probed.libraries
        # detached and drained: no more calls can come
        self._exits(sorted(set(self._gone()) | set(self._gone_at)), time.monotonic_ns())
        self._gone_at.clear()
        self.accounting.settle()
        return run.exit_status()

    def _gone(self) -> list[int]:
        return sorted(pid for pid in self.accounting.running() if not process_alive(pid))

    def _exits(self, pids: list[int], now_ns: int) -> None:
        for pid in pids:
            self.accounting.process_exited(pid, now_ns)
            if pid in self.accounting.processes:
                self.on_exit(self.accounting.processes[pid])

    def _step(self, tracer: Tracer, timeout_ms: int) -> None:
        ring = tracer.ring
        for pid in self._gone():  # seen gone: all it sent lies before the ring's position now
            self._gone_at.setdefault(pid, ring.produced())
        if timeout_ms:
            records = ring.poll(timeout_ms)
        else:  # detached: everything left, the spool's backlog included
            records = []
            while batch := ring.drain():
                records += batch
        now = time.monotonic_ns()
        self._feed(tracer, [from_record(r) for r in records], now)
        read = ring.consumed()
        done = sorted(pid for pid, at in self._gone_at.items() if read >= at)
        for pid in done:
            del self._gone_at[pid]
        self._exits(done, now)
        self.accounting.settle_live(now)

    def _feed(self, tracer: Tracer, raws: list[RawEvent], now_ns: int) -> None:
        self.accounting.feed([c for c in (self._call(tracer, raw) for raw in raws) if c], now_ns)

    def _call(self, tracer: Tracer, raw: RawEvent) -> MemCall | None:
        self.sites.see(raw.pid)  # the maps, while the process runs
        try:
            call = decode_event(raw, self.plan.probes, self.t0_ns)
        except ValueError:
            self.decode_errors += 1
            return None
        stack = tracer.maps.user_stack(raw.stack_id) if self.options.stacks else None
        site = self.sites.site(raw.pid, raw.caller, stack, site_frame(raw.cfg))
        if self.py_stacks is not None:  # the Python line first: what the program's own code did
            py = self.py_stacks.pop(raw.tid, raw.ts_ns)
            site = (python_line(py), *site) if py is not None else site
        return MemCall(call.ts_ns, call.duration_ns or 0, call.pid, call.tid, call.process,
                       call.event, call.ret or 0, call.args, site)

    def ms(self, ts_ns: int) -> float:
        """A monotonic timestamp as milliseconds since tracing began."""
        return time_ms(ts_ns, self.t0_ns)
