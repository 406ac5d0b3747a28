"""stats --by collective: NCCL's calls traced (not counted in the kernel: their
counts, datatypes and communicators are in their arguments), kept, joined to
their kernels' GPU time once tracing ends (--gpu-time: in the environment of
`-- COMMAND`, or injected into the --pid/--comm processes once the probes are
in), and summed per operation, size and rank, with the ranks' waits, within
the run (analysis/nccl.py)."""

from __future__ import annotations

import io
import time
from typing import Callable

from cudaprobe.analysis.gpustats import gpu_stats
from cudaprobe.analysis.nccl import collective_stats
from cudaprobe.analysis.stats import KernelTally, StatsReport
from cudaprobe.analysis.summary import NOT_LOST
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import join
from cudaprobe.output.base import Reporter
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.sessions.gputime import GpuTimeRun
from cudaprobe.sessions.gputime_attach import GpuTimeAttach
from cudaprobe.sessions.trace import SessionOptions, TraceSession
from cudaprobe.targets.selection import Targets


class _Keep(Reporter):
    """The reporter of a --by collective session: keeps the NCCL calls."""

    name = "keep"

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.kept: list[Call] = []

    def calls(self, calls: list[Call]) -> None:
        self.kept += [c for c in calls if c.api == "nccl"]


def stats_by_collective(plan: ProbePlan, settings: bpfprog.Settings, command: list[str],
                        targets: Targets | None, notify: Callable[[str], None],
                        duration: float | None, gpu: GpuTimeRun | GpuTimeAttach | None
                        ) -> tuple[StatsReport, int]:
    keep = _Keep()
    per_function = KernelTally(lambda c: c.event)
    session = TraceSession(plan, settings, keep, None, SessionOptions(
        duration=duration, command=command, targets=targets, notify=notify,
        command_env=gpu.env if gpu is not None else {},
        gpu_attach=gpu if isinstance(gpu, GpuTimeAttach) else None))
    started = time.monotonic_ns()  # CLOCK_MONOTONIC: the clock of the rows and GPU records
    status = session.run()
    ended = time.monotonic_ns()
    work = gpu.read() if gpu is not None else []
    if work:
        join(keep.kept, work, gpu.reader.cupti_clock)
    per_function.add(keep.kept)
    s = session.summary
    lost = {k: v for k, v in s.lost.items() if k not in NOT_LOST}
    report = StatsReport(per_function.functions, (ended - started) / 1e9, s.libraries,
                         s.not_found, len(s.in_flight), lost,
                         nccl=collective_stats(keep.kept, (started, ended)))
    if gpu is not None and work:
        report.gpu = gpu_stats(work, gpu.dropped)
    return report, status
