"""A stats session: attach the stats program (bpf/stats.bpf.c), read the
aggregation maps every --interval and at the end. The maps are read, never
drained, so what the kernel counted since attach is there whatever the call
rate. With --by kernel the launches are traced instead and counted per kernel
name (stats_by_kernel); with --by collective, NCCL's calls (collectives.py);
count() runs the one --by asks for, with --gpu-time's GPU work beside it."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from cudaprobe.analysis.gpustats import gpu_stats
from cudaprobe.analysis.stats import KernelTally, StatsReport, collect
from cudaprobe.analysis.stats_compare import (
    DEFAULT_MIN_CALLS,
    DEFAULT_THRESHOLD,
    REGRESSION_EXIT,
    compare,
    load_report,
)
from cudaprobe.analysis.summary import NOT_LOST, Summary
from cudaprobe.catalogue.functions import ArgKind, Function
from cudaprobe.decode.calls import Call
from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.errors import UsageError
from cudaprobe.output.base import Reporter
from cudaprobe.output.compare_view import render_changes
from cudaprobe.output.report_files import report_output, write_report
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.table import make_console
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.plan import ProbePlan, select_functions
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.by_line import stats_by_line
from cudaprobe.sessions.collectives import stats_by_collective
from cudaprobe.sessions.gputime import gpu_time_for
from cudaprobe.sessions.gputime_attach import GpuTimeAttach
from cudaprobe.sessions.probing import Probing
from cudaprobe.sessions.run import ProbeRun, RunOptions, say_if_no_cuda
from cudaprobe.sessions.trace import SessionOptions, TraceSession
from cudaprobe.targets.selection import Targets


@dataclass
class StatsOptions(RunOptions):
    interval: float | None = None  # print the table this often (cumulative)
    sort: str = "total"


def snapshot(tracer: Tracer, plan: ProbePlan, probed: Summary,
             elapsed_s: float) -> StatsReport:
    """What the maps hold now; `probed` says which libraries are probed by now."""
    counters = tracer.counters()
    return StatsReport(
        functions=collect(plan.probes, tracer.maps.read_stats(), tracer.maps.read_errors()),
        duration_s=elapsed_s,
        libraries=probed.libraries,
        not_found=probed.not_found,
        in_flight=tracer.pairing.in_flight_count(),
        lost={k: counters[k] for k in ("pairing_map_full", "recursion_depth")},
        untraced=probed.untraced,
        processes_traced=probed.processes_traced,
    )


def run_stats(plan: ProbePlan, settings: Settings, options: StatsOptions,
              console: Console) -> tuple[StatsReport, int]:
    """Count until stopped; returns the final report and the exit status for cudaprobe
    (the command's, with `-- COMMAND`). Interval tables go to `console`."""
    with ProbeRun(plan, settings, options) as run:
        while run.running():
            run.sleep(options.interval or 3600.0)
            if options.interval and run.running():
                report = snapshot(run.tracer, plan, run.probed, run.elapsed_s)
                render_stats(report, console, options.sort,
                             title=f"cudaprobe stats, {run.elapsed_s:.0f}s")
                console.print()
        run.finish()
        report = snapshot(run.tracer, plan, run.probed, run.elapsed_s)
    if run.command is None or run.command.released:
        say_if_no_cuda(options, report.total_calls + report.in_flight)
    return report, run.exit_status()


class _Tally(Reporter):
    """The reporter of a --by kernel session: counts launches, writes nothing."""

    name = "tally"

    def __init__(self, tally: KernelTally) -> None:
        super().__init__(io.StringIO())
        self.tally = tally

    def calls(self, calls: list[Call]) -> None:
        self.tally.add(calls)


def stats_by_kernel(plan: ProbePlan, settings: Settings, command: list[str],
                    targets: Targets | None, notify, duration: float | None,
                    command_env: dict[str, str],
                    gpu_attach: GpuTimeAttach | None = None
                    ) -> tuple[StatsReport, int]:
    """Trace the launches and count them per kernel name (analysis.stats.KernelTally)."""
    tally = KernelTally()
    kernels = KernelSymbolizer.for_session(command, [a.file for a in plan.attachments])
    session = TraceSession(plan, settings, _Tally(tally), None, SessionOptions(
        duration=duration, command=command, symbolize=kernels, see_process=kernels.see,
        targets=targets, notify=notify, command_env=command_env, gpu_attach=gpu_attach))
    started = time.monotonic()
    status = session.run()
    s = session.summary
    lost = {k: v for k, v in s.lost.items() if k not in NOT_LOST}
    report = StatsReport(tally.functions, time.monotonic() - started, s.libraries, s.not_found,
                         len(s.in_flight), lost)
    return report, status


def functions_to_count(by: str, events: list[str], apis: set[str]) -> list[Function]:
    """The functions -e selects, for --by function or collective; for --by kernel,
    the launches among them and the calls that name their kernels."""
    functions = select_functions(events or (["kernel"] if by == "kernel" else []), apis)
    if by != "kernel":
        return functions
    functions = [f for f in functions if f.category == "kernel"]
    if not functions:
        raise UsageError("--by kernel counts launches: -e must include some")
    # and the calls that make driver kernel handles, which name the launches
    return functions + [f for f in select_functions([], apis)
                        if any(a.kind is ArgKind.OUT_FUNCTION for a in f.args)]


def count(probing: Probing, notify: Callable[[str], None], console: Console,
          by: str = "function", interval: float | None = None, sort: str = "total",
          gpu_time: bool = False, folded: str | None = None,
          force: bool = False) -> tuple[StatsReport, int]:
    """Count as --by says (function, kernel or collective), with --gpu-time's
    GPU work beside; interval tables go to `console`. Returns the final report
    and the exit status for cudaprobe."""
    plan, settings, request = probing.plan, probing.settings, probing.request
    command = list(request.command)
    if by == "line":  # its trace joins the GPU work to the calls itself
        return stats_by_line(plan, settings, command, probing.targets, notify,
                             request.duration, gpu_time, folded, force)
    gpu = gpu_time_for(notify, command) if gpu_time else None
    command_env = gpu.env if gpu is not None else {}
    # --pid/--comm: the library injected once the probes are in
    gpu_attach = gpu if isinstance(gpu, GpuTimeAttach) else None
    try:
        if by == "collective":
            report, status = stats_by_collective(plan, settings, command, probing.targets,
                                                 notify, request.duration, gpu)
        elif by == "kernel":
            report, status = stats_by_kernel(plan, settings, command, probing.targets, notify,
                                             request.duration, command_env, gpu_attach)
        else:
            report, status = run_stats(plan, settings, StatsOptions(
                command=command, targets=probing.targets, notify=notify,
                duration=request.duration, interval=interval, sort=sort,
                command_env=command_env, gpu_attach=gpu_attach), console)
        if gpu is not None and by != "collective" and (work := gpu.read()):
            report.gpu = gpu_stats(work, gpu.dropped)
    finally:
        if gpu is not None:
            gpu.close()
    return report, status


@dataclass(frozen=True)
class StatsRequest:
    """What stats' own options say: the rows (--sort, --by, --interval), where the
    report goes (-f, --json, -o, --force), --compare and its bounds, --gpu-time."""
    sort: str = "total"
    by: str = "function"
    interval: float | None = None
    fmt: str | None = None
    as_json: bool = False
    output: str | None = None
    force: bool = False
    baseline: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    min_calls: int = DEFAULT_MIN_CALLS
    gpu_time: bool = False
    folded: str | None = None  # --folded: the stacks weighted by GPU time (--by line)


def report_stats(probing: Probing, request: StatsRequest) -> int:
    """Count until stopped, then report (and compare with --compare's baseline);
    returns the exit status for cudaprobe."""
    r = request
    before = load_report(r.baseline) if r.baseline else None
    stream, json_out, human = report_output(r.output, r.force, r.fmt, r.as_json,
                                            bool(probing.request.command))
    notify = probing.begin("counting")
    report, status = count(probing, notify, human, r.by, r.interval, r.sort, r.gpu_time,
                           r.folded, r.force)
    document = report.to_dict(r.sort)
    changes = None
    if before is not None:
        changes = compare(before, document, r.threshold, r.min_calls)
        document["compare"] = {"baseline": r.baseline, "threshold_percent": r.threshold,
                               "min_calls": r.min_calls, "moved": [c.to_dict() for c in changes]}

    def write() -> None:
        render_stats(report, human, r.sort)
        if changes is not None:
            render_changes(changes, human, r.baseline, r.threshold)
        if r.output or json_out:
            if json_out:
                stream.write(json.dumps(document, indent=2) + "\n")
            else:
                render_stats(report, make_console(stream), r.sort)
            stream.close()

    status = write_report(write, status, bool(probing.request.command))
    return REGRESSION_EXIT if not status and changes else status
