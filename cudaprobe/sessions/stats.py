"""A stats session: attach in CP_STATS mode, read the aggregation maps every
--interval and at the end. The maps are read, never drained, so what the
kernel counted since attach is there whatever the call rate."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from cudaprobe.analysis.stats import StatsReport, collect
from cudaprobe.analysis.summary import Summary
from cudaprobe.output.stats_view import render_stats
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.run import ProbeRun, RunOptions, say_if_no_cuda


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
