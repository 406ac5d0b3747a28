"""cudaprobe serve: CUDA API metrics for a scraper, from a node daemon."""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import click

from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.commands.options import StartsCommand, probe_options, run_probing
from cudaprobe.commands.otlp_options import otlp_config, otlp_options
from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.errors import UsageError
from cudaprobe.output.fanout import Fanout
from cudaprobe.output.metrics_sink import MetricsSink
from cudaprobe.output.otlp_sinks import otlp_sink
from cudaprobe.output.prometheus import MetricsServer, parse_listen_address
from cudaprobe.output.table import make_console
from cudaprobe.probe.plan import select_functions
from cudaprobe.sessions.duty import EXACT, DutyCycle, parse_duty
from cudaprobe.sessions.probing import ProbeRequest, Probing
from cudaprobe.sessions.trace import SessionOptions, TraceSession
from cudaprobe.targets.jobs import KUBELET_LOGS, Jobs


@click.command("serve", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events="count")
@click.option("--prometheus", "prometheus_at", metavar="[ADDR:]PORT",
              help="Serve Prometheus metrics on http://ADDR:PORT/metrics. ADDR: 127.0.0.1 "
                   "unless given (0.0.0.0 for every IPv4 address, [::] for every address).")
@click.option("--gpu-time", is_flag=True,
              help="Also a histogram of each kernel's GPU time, through CUPTI; with "
                   "--pid/--comm, and on a node (no target), the library is put into each "
                   "running process, and those it cannot go into are counted by reason; "
                   "with --duty too, CUPTI records all along (switched with the slices, "
                   "it can kill a job), every kernel counted unscaled, its cost on each "
                   "launch paid all along: 4-10% of a launch-bound job's speed; at the "
                   "stop CUPTI is taken out of each process (docs/fleet.md).")
@click.option("--py-stacks", is_flag=True,
              help="With --gpu-time: each process's kernels' GPU time by the Python line "
                   "that launched them, backward work on its forward op's line (the "
                   "busiest 10 lines of each process, the rest as `other`): "
                   "cudaprobe_gpu_line_seconds_total (docs/prometheus.md). Each call's "
                   "Python stack is read by the probe (CPython 3.9-3.13; "
                   "docs/pystacks.md): with --duty, only in the slices.")
@click.option("--kubelet-logs", metavar="DIR", default=KUBELET_LOGS,
              help="Where the kubelet keeps its pods/ and containers/ log directories: "
                   "they name each process's pod, namespace and container for the job "
                   "labels (docs/prometheus.md).")
@click.option("--duty", metavar="FRACTION", default="100%",
              help="Probes on for this fraction of each --duty-period (2% or 0.02), off the "
                   "rest, the counts scaled by its inverse: an estimate, for a node daemon's "
                   "cost (docs/fleet.md); the allocations and frees stay on, counted "
                   "exactly. Default: every call counted. Only with no --pid, --comm or "
                   "command.")
@click.option("--duty-period", metavar="SECONDS", type=click.FloatRange(min=1), default=30.0,
              help="With --duty: the period, one slice traced in each at a random point.")
@otlp_options
def serve_command(probe: ProbeRequest, prometheus_at, gpu_time, py_stacks, kubelet_logs, duty,
                  duty_period, **otlp) -> None:
    """Count CUDA API calls and serve them as metrics: calls, errors and
    latency per function, bytes copied, live allocated bytes, lost events
    (docs/prometheus.md), each process's labelled with its job: Kubernetes
    namespace, pod and container, container id, Slurm job, launcher's rank.

    Targets as for trace. With none, every process using the CUDA libraries
    found in the usual places (what `trace` probes by default): the node
    daemon's use (docs/fleet.md). Runs until SIGINT or SIGTERM, --duration,
    or the exit of `-- COMMAND` (or of every --pid). Exit status 2: bad input,
    or the address is taken. With --otlp, the metrics (and spans, as trace
    --otlp sends them) are pushed to an OpenTelemetry collector (docs/otlp.md).

    \b
    Examples:
      sudo cudaprobe serve --prometheus :9464
      sudo cudaprobe serve --prometheus 0.0.0.0:9464 --api driver
      sudo cudaprobe serve --prometheus 0.0.0.0:9464 --api driver --duty 2%
      sudo cudaprobe serve --prometheus :9464 --comm python3 -e memory,transfer,kernel
      sudo cudaprobe serve --prometheus :9464 --gpu-time -- python train.py
      sudo cudaprobe serve --prometheus 0.0.0.0:9464 --gpu-time
      sudo cudaprobe serve --prometheus 0.0.0.0:9464 --api driver --duty 2% --gpu-time --py-stacks
      sudo cudaprobe serve --otlp http://collector:4318 --otlp-slow 1ms
    """
    address = parse_listen_address(prometheus_at) if prometheus_at else None
    otlp = otlp_config(**otlp)
    if address is None and otlp is None and not probe.dump_bpf:
        raise UsageError("serve needs somewhere to serve: --prometheus [ADDR:]PORT "
                         "or --otlp ENDPOINT")
    if py_stacks and not gpu_time:
        raise UsageError("serve --py-stacks counts GPU time by Python line: it goes with "
                         "--gpu-time")
    command = list(probe.command)
    fraction = parse_duty(duty)
    if fraction < 1:
        if command or probe.pids or probe.comm:
            raise UsageError("--duty is for the node daemon's serve, which probes the "
                             "libraries for every process: not with --pid, --comm or a "
                             "command (their processes are linked one by one)")
        DutyCycle.check(fraction, duty_period)

    def session(probing: Probing) -> int:
        jobs = Jobs(kubelet_logs)
        metrics = CallMetrics(jobs=jobs)
        if gpu_time and not command:  # into running processes (a node's too): outcomes counted
            metrics.gpu_injection()
        lines = metrics.python_lines() if py_stacks else None
        cycle = DutyCycle(fraction, duty_period, metrics) if fraction < 1 else None
        with MetricsServer(metrics, *address) if address else contextlib.nullcontext() as server:
            notify = probing.begin("counting")
            if cycle is not None:
                cycle.notify = notify
            def serving() -> None:
                """The probes are in: from now on, what is scraped is being counted."""
                server.ready.set()
                notify(f"serving Prometheus metrics on {server.url}")

            sink = MetricsSink(metrics, serving if server else None)
            if otlp is not None:
                sink = Fanout(sink, [otlp_sink(otlp, notify, metrics)])
            # launches named, for the kernel label
            kernels = KernelSymbolizer.for_session(command,
                                                   [a.path for a in probing.plan.attachments])
            options = SessionOptions(duration=probe.duration, command=command,
                                     symbolize=kernels, see_process=kernels.see,
                                     targets=probing.targets, notify=notify,
                                     on_counters=metrics.set_lost, gpu_time=gpu_time,
                                     on_gpu_work=metrics.add_gpu, on_process=jobs.refresh,
                                     on_gpu_recording=metrics.gpu_recording,
                                     on_gpu_refused=metrics.gpu_refused, gpu_lines=lines,
                                     on_started=cycle.start if cycle is not None else None)
            if cycle is not None:  # says CUPTI records all along
                cycle.gpu_of = lambda: options.gpu_attach
            try:
                settings = probing.settings if cycle is None else dataclasses.replace(
                    probing.settings, duty_exact=EXACT)  # their links stay on
                status = TraceSession(probing.plan, settings, sink,
                                      make_console(sys.stderr), options).run()
                if cycle is not None and cycle.metrics.weight != 1:
                    notify(f"--duty: the summary's calls of the sampled functions are those "
                           f"the probes traced, unscaled; the metrics count those begun in "
                           f"the slices, each as {cycle.metrics.weight:g}")
                return status
            finally:
                if cycle is not None:
                    cycle.stop()

    run_probing(probe, select_functions(list(probe.events), set(probe.apis)), session,
                py_stacks=py_stacks)
