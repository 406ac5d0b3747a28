"""cudaprobe stats: per-function counts, latency percentiles and errors, counted in the kernel."""

from __future__ import annotations

import io
import json
import sys
import time

import click

from cudaprobe.analysis.gpustats import gpu_stats
from cudaprobe.analysis.stats import SORT_KEYS, KernelTally, StatsReport
from cudaprobe.analysis.stats_compare import (
    DEFAULT_MIN_CALLS,
    DEFAULT_THRESHOLD,
    REGRESSION_EXIT,
    compare,
    load_report,
)
from cudaprobe.analysis.summary import NOT_LOST
from cudaprobe.catalogue.functions import NCCL, ArgKind
from cudaprobe.commands.options import (
    APIS,
    FiniteRange,
    Seconds,
    StartsCommand,
    announce,
    plan_targets,
    probe_options,
    report_file_options,
    report_output,
    write_report,
)
from cudaprobe.decode.calls import Call
from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.errors import UsageError
from cudaprobe.output.base import Reporter
from cudaprobe.output.compare_view import render_changes
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.table import make_console
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import ProbePlan, select_functions
from cudaprobe.sessions.collectives import stats_by_collective
from cudaprobe.sessions.gputime import GpuTimeRun, check_gpu_time
from cudaprobe.sessions.stats import StatsOptions, run_stats
from cudaprobe.sessions.trace import SessionOptions, TraceSession
from cudaprobe.targets.selection import Targets


class _Tally(Reporter):
    """The reporter of a --by kernel session: counts launches, writes nothing."""

    name = "tally"

    def __init__(self, tally: KernelTally) -> None:
        super().__init__(io.StringIO())
        self.tally = tally

    def calls(self, calls: list[Call]) -> None:
        self.tally.add(calls)


def stats_by_kernel(plan: ProbePlan, settings: bpfprog.Settings, command: list[str],
                    targets: Targets | None, notify, duration: float | None,
                    command_env: dict[str, str]) -> tuple[StatsReport, int]:
    """Trace the launches and count them per kernel name (analysis.stats.KernelTally)."""
    tally = KernelTally()
    kernels = KernelSymbolizer.for_session(command, [a.path for a in plan.attachments])
    session = TraceSession(plan, settings, _Tally(tally), None, SessionOptions(
        duration=duration, command=command, symbolize=kernels, see_process=kernels.see,
        targets=targets, notify=notify, command_env=command_env))
    started = time.monotonic()
    status = session.run()
    s = session.summary
    lost = {k: v for k, v in s.lost.items() if k not in NOT_LOST}
    report = StatsReport(tally.functions, time.monotonic() - started, s.libraries, s.not_found,
                         len(s.in_flight), lost)
    return report, status


@click.command("stats", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events="count")
@click.option("--sort", type=click.Choice(sorted(SORT_KEYS)), default="total",
              help="Order of the rows (largest first; `name` alphabetical).")
@click.option("--by", type=click.Choice(["function", "kernel", "collective"]),
              default="function",
              help="A row per traced function (counted in the kernel), per kernel "
                   "launched (counted from traced launches: costs what `trace` does), or "
                   "per NCCL collective and rank, with bandwidths and stragglers "
                   "(docs/nccl.md).")
@click.option("-i", "--interval", type=Seconds(), metavar="SECONDS",
              help="Also print the table (cumulative) every SECONDS.")
@report_file_options("docs/stats.md")
@click.option("--compare", "baseline", metavar="BASELINE.json",
              help=f"Compare with an earlier JSON report (-o X.json); exit {REGRESSION_EXIT} if a "
                   "function's count or p50 moved more than --threshold.")
@click.option("--threshold", type=FiniteRange(min=0), default=DEFAULT_THRESHOLD,
              metavar="PERCENT", help="How far a count or p50 may move under --compare.")
@click.option("--min-calls", type=click.IntRange(min=1), default=DEFAULT_MIN_CALLS,
              metavar="N", help="Compare p50 only where both runs made at least N calls.")
@click.option("--gpu-time", is_flag=True,
              help="With -- COMMAND: also GPU time per kernel name and per copy kind, "
                   "through CUPTI (docs/gputime.md).")
def stats_command(libs, events, api, duration, dump_bpf, pids, comm, wait, command, sort, by,
                  interval, fmt, as_json, output, force, baseline, threshold, min_calls,
                  gpu_time) -> None:
    """Count CUDA calls in the kernel: per function, calls, total, avg, min, max
    and p50/p95/p99 latency, and failed calls by error name. The table is
    sorted by total time. Percentiles are estimated from log2 latency buckets
    (within a factor of 2). The kernel keeps the counts, so the cost to
    cudaprobe does not grow with the call rate.

    With `-- COMMAND`, start COMMAND, count it and every process it starts
    until the last has exited, and exit with its exit status. With --pid or
    --comm, attach to processes already running; --pid stops when they have
    exited. Else count every process until Ctrl-C or --duration. With
    --compare, exit 3 when something moved (a failing COMMAND's status
    wins); 2 is cudaprobe's own errors.

    \b
    Examples:
      sudo cudaprobe stats -- ./my_app
      sudo cudaprobe stats --pid 31337 --interval 5
      sudo cudaprobe stats --interval 5 -e memory,transfer
      sudo cudaprobe stats -o api.json -- python train.py
      sudo cudaprobe stats --compare api.json -- python train.py
      sudo cudaprobe stats --by kernel -- python train.py
      sudo cudaprobe stats --gpu-time -- python train.py
      sudo cudaprobe stats --by collective --gpu-time -- torchrun --nproc_per_node 2 train.py

    With --by kernel, a row per kernel name: the launches (category kernel)
    are traced, not counted in the kernel, and each is named as `trace` names
    it (the calls that make driver kernel handles are traced too, to name
    them); launches of an unknown kernel are a row per call, "(kernel unknown)".

    With --by collective, NCCL's calls are traced (the default set of --api nccl,
    or -e): a row per collective and rank with calls, bytes and host latency,
    with --gpu-time the NCCL kernels' GPU time and nccl-tests' algbw and busbw;
    then, per communicator, how long its ranks waited for each other and which
    rank came last (the straggler).
    """
    before = load_report(baseline) if baseline else None  # checked before anything runs
    apis = APIS[api]
    if gpu_time:
        check_gpu_time(list(command))
    by_kernel, by_collective = by == "kernel", by == "collective"
    if (by_kernel or by_collective) and interval:
        raise UsageError("--interval goes with --by function")
    if by_collective and NCCL not in apis:
        raise UsageError("--by collective counts NCCL's calls: --api must include nccl")
    if by_collective:
        apis = {NCCL}
    functions = select_functions(list(events) or (["kernel"] if by_kernel else []), apis)
    if by_kernel:
        functions = [f for f in functions if f.category == "kernel"]
        if not functions:
            raise UsageError("--by kernel counts launches: -e must include some")
        # and the calls that make driver kernel handles, which name the launches
        functions += [f for f in select_functions([], apis)
                      if any(a.kind is ArgKind.OUT_FUNCTION for a in f.args)]
    plan, settings, targets = plan_targets(functions, libs, apis, pids, comm, wait, command,
                                           dump_bpf, stats=by == "function")
    if dump_bpf:
        click.echo(bpfprog.render(plan.probes, settings))
        return
    stream, as_json, human = report_output(output, force, fmt, as_json)
    notify = announce(plan, targets, "counting")
    gpu = GpuTimeRun(notify) if gpu_time else None
    command_env = gpu.env if gpu is not None else {}
    try:
        if by_collective:
            report, status = stats_by_collective(plan, settings, list(command), targets,
                                                 notify, duration, gpu)
        elif by_kernel:
            report, status = stats_by_kernel(plan, settings, list(command), targets, notify,
                                             duration, command_env)
        else:
            report, status = run_stats(plan, settings, StatsOptions(
                command=list(command), targets=targets, notify=notify, duration=duration,
                interval=interval, sort=sort, command_env=command_env), human)
        if gpu is not None and not by_collective and (work := gpu.read()):
            report.gpu = gpu_stats(work, gpu.dropped)
    finally:
        if targets is not None:
            targets.close()
        if gpu is not None:
            gpu.close()
    document = report.to_dict(sort)
    changes = None
    if before is not None:
        changes = compare(before, document, threshold, min_calls)
        document["compare"] = {"baseline": baseline, "threshold_percent": threshold,
                               "min_calls": min_calls, "moved": [c.to_dict() for c in changes]}

    def write() -> None:
        render_stats(report, human, sort)
        if changes is not None:
            render_changes(changes, human, baseline, threshold)
        if output or as_json:
            if as_json:
                stream.write(json.dumps(document, indent=2) + "\n")
            else:
                render_stats(report, make_console(stream), sort)
            stream.close()

    status = write_report(write, status, bool(command))
    if not status and changes:
        status = REGRESSION_EXIT
    if status:
        sys.exit(status)
