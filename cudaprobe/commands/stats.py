"""cudaprobe stats: per-function counts, latency percentiles and errors, counted in the kernel."""

from __future__ import annotations

import dataclasses
import functools

import click

from cudaprobe.analysis.stats import SORT_KEYS
from cudaprobe.analysis.stats_compare import (
    DEFAULT_MIN_CALLS,
    DEFAULT_THRESHOLD,
    REGRESSION_EXIT,
    load_report,
)
from cudaprobe.catalogue.functions import NCCL
from cudaprobe.commands.options import (
    FiniteRange,
    Seconds,
    StartsCommand,
    probe_options,
    report_file_options,
    run_probing,
)
from cudaprobe.errors import UsageError
from cudaprobe.output.files import check_output_path
from cudaprobe.sessions.gputime import check_gpu_time
from cudaprobe.sessions.probing import ProbeRequest
from cudaprobe.sessions.stats import StatsRequest, functions_to_count, report_stats


@click.command("stats", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events="count")
@click.option("--sort", type=click.Choice(sorted(SORT_KEYS)), default="total",
              help="Order of the rows (largest first; `name` alphabetical).")
@click.option("--by", type=click.Choice(["function", "kernel", "collective", "line"]),
              default="function",
              help="A row per traced function (counted in the kernel), per kernel "
                   "launched (counted from traced launches: costs what `trace` does), "
                   "per NCCL operation, message size and rank in nccl-tests' columns, "
                   "with --gpu-time the ranks' waits on the GPU (docs/nccl.md), or per "
                   "Python line that made the calls (their Python stacks traced: "
                   "docs/pystacks.md).")
@click.option("-i", "--interval", metavar="SECONDS",
              type=Seconds(0.1, "tables faster than that scroll by unread, and cost the "
                                "tracing its time"),
              help="Also print the table (cumulative) every SECONDS (0.1 or more).")
@report_file_options("docs/stats.md")
@click.option("--compare", "baseline", metavar="BASELINE.json",
              help=f"Compare with an earlier JSON report (-o X.json); exit {REGRESSION_EXIT} if a "
                   "function's count or p50 moved more than --threshold.")
@click.option("--threshold", type=FiniteRange(min=0), default=DEFAULT_THRESHOLD,
              metavar="PERCENT", help="How far a count or p50 may move under --compare.")
@click.option("--min-calls", type=click.IntRange(min=1), default=DEFAULT_MIN_CALLS,
              metavar="N", help="Compare p50 only where both runs made at least N calls.")
@click.option("--gpu-time", is_flag=True,
              help="Also GPU time per kernel name and per copy kind, through CUPTI; with "
                   "--pid/--comm the library is injected into the running process, and "
                   "CUPTI is taken out of it at the end (docs/gputime.md).")
@click.option("--folded", metavar="FILE",
              help="With --by line --gpu-time: also write the Python stacks weighted by "
                   "their GPU time (ns) as folded stacks, for speedscope or flamegraph.pl; "
                   "PyTorch's backward work under its forward op's stack, after "
                   "[backward] (docs/pystacks.md).")
def stats_command(probe: ProbeRequest, sort, by, interval, fmt, as_json, output, force,
                  baseline, threshold, min_calls, gpu_time, folded) -> None:
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
      sudo cudaprobe stats --by line --gpu-time -- python train.py
      sudo cudaprobe stats --by line --gpu-time --folded gpu.folded -- python train.py
      sudo cudaprobe stats --gpu-time -- python train.py
      sudo cudaprobe stats --gpu-time --pid 31337 -d 5
      sudo cudaprobe stats --by collective --gpu-time -- torchrun --nproc_per_node 2 train.py

    With --by kernel, a row per kernel name: the launches (category kernel)
    are traced, not counted in the kernel, and each is named as `trace` names
    it (the calls that make driver kernel handles are traced too, to name
    them); launches of an unknown kernel are a row per call, "(kernel unknown)".

    With --by line, the calls are traced with their Python stacks (as `trace
    --py-stacks`) and counted per Python line: the innermost frame that is
    the program's own (outside site-packages and the standard library), as
    `file:line (function)`; with --gpu-time, the GPU time of what each line
    queued, PyTorch's backward kernels on the line of the forward op they
    differentiate (its FORWARD and BACKWARD columns). Calls from threads with no Python
    frame are one row.

    With --by collective, NCCL's calls are traced (the default set of --api nccl,
    or -e): a row per operation (a call, or a group's calls), message size,
    datatype and rank, as nccl-tests prints them: size, count, type, calls,
    time per call, algbw and busbw. With --gpu-time (launched, or --pid on
    each rank of a running job) the time is the NCCL kernels' on the GPU, and
    per communicator each rank's wait for the others, from when each GPU
    started each operation, and the rank they waited for (the straggler).
    """
    if baseline:  # checked whole before anything (the root check too) runs
        load_report(baseline)
    apis = set(probe.apis)
    by_collective = by == "collective"
    if gpu_time:
        check_gpu_time(list(probe.command), probe.pids, probe.comm)
    if by != "function" and interval:
        raise UsageError("--interval goes with --by function")
    if folded is not None:
        if by != "line" or not gpu_time:
            raise UsageError("--folded weighs Python stacks by GPU time: it goes with "
                             "--by line --gpu-time")
        check_output_path(folded, force)
    if by_collective and NCCL not in apis:
        raise UsageError("--by collective counts NCCL's calls: --api must include nccl")
    if by_collective:
        apis = {NCCL}
        probe = dataclasses.replace(probe, apis=frozenset(apis))
    functions = functions_to_count(by, list(probe.events), apis)
    request = StatsRequest(sort, by, interval, fmt, as_json, output, force, baseline, threshold,
                           min_calls, gpu_time, folded)
    run_probing(probe, functions, functools.partial(report_stats, request=request),
                stats=by == "function", py_stacks=by == "line")
