"""`cudaprobe stats --by line` (sessions/stats.py): a row per Python line (--py-stacks), from the
trace path: each call's stack read by the probe, its calls counted under
the innermost line that is the user's own (analysis/by_line.py)."""

from __future__ import annotations

import io
import time

from cudaprobe.analysis.by_line import FoldedStacks, GpuByLine, line_of
from cudaprobe.analysis.stats import KernelTally, StatsReport
from cudaprobe.analysis.summary import NOT_LOST
from cudaprobe.decode.calls import Call
from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.output.base import Reporter
from cudaprobe.output.files import LazyOutputFile
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.sessions.trace import SessionOptions, TraceSession
from cudaprobe.targets.selection import Targets


class _ByLine(Reporter):
    """The reporter of a --by line session: counts, writes nothing."""

    name = "by-line"

    def __init__(self, folded: bool = False) -> None:
        super().__init__(io.StringIO())
        self.tally = KernelTally(line_of)
        self.gpu = GpuByLine()
        self.folded = FoldedStacks() if folded else None

    def calls(self, calls: list[Call]) -> None:
        self.tally.add(calls)
        self.gpu.add(calls)
        if self.folded is not None:
            self.folded.add(calls)


def stats_by_line(plan: ProbePlan, settings: bpfprog.Settings, command: list[str],
                  targets: Targets | None, notify, duration: float | None,
                  gpu_time: bool, folded: str | None = None,
                  force: bool = False) -> tuple[StatsReport, int]:
    """Trace the calls with their Python stacks and count them per line; with
    gpu_time, the GPU work each line queued (rows joined when COMMAND exits),
    and with `folded` a file of the stacks weighted by it (FoldedStacks)."""
    by_line = _ByLine(folded is not None)
    kernels = KernelSymbolizer.for_session(command, [a.file for a in plan.attachments])
    session = TraceSession(plan, settings, by_line, None, SessionOptions(
        duration=duration, command=command, symbolize=kernels, see_process=kernels.see,
        targets=targets, notify=notify, gpu_time=gpu_time))
    started = time.monotonic()
    status = session.run()
    s = session.summary
    lost = {k: v for k, v in s.lost.items() if k not in NOT_LOST}
    report = StatsReport(by_line.tally.functions, time.monotonic() - started, s.libraries,
                         s.not_found, len(s.in_flight), lost, per="line")
    if gpu_time:
        report.gpu = by_line.gpu.stats()
    if folded is not None and by_line.folded is not None:
        out = LazyOutputFile(folded, force)
        for line in by_line.folded.lines():
            out.write(line)
        out.close()
    return report, status
