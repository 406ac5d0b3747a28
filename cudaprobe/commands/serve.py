"""cudaprobe serve: CUDA API metrics for a scraper, from a node daemon."""

from __future__ import annotations

import sys

import click

from .. import bpfprog
from ..errors import UsageError
from ..metrics import CallMetrics, MetricsSink
from ..probes import select_functions
from ..prometheus import MetricsServer, parse_listen_address
from ..reporters.table import make_console
from ..session import SessionOptions, TraceSession
from .options import APIS, announce, plan_targets, probe_options


@click.command("serve", context_settings={"show_default": True})
@probe_options(events="Functions or categories to count, comma-separated "
                      "(see `cudaprobe list`). Default: all.")
@click.option("--prometheus", "prometheus_at", metavar="[ADDR:]PORT",
              help="Serve Prometheus metrics on http://ADDR:PORT/metrics. ADDR: 127.0.0.1 "
                   "unless given (0.0.0.0 for every IPv4 address, [::] for every address).")
def serve_command(libs, events, api, duration, dump_bpf, pids, comm, wait, command,
                  prometheus_at) -> None:
    """Count CUDA API calls and serve them as metrics: calls, errors and
    latency per function, bytes copied, live allocated bytes, lost events
    (docs/prometheus.md).

    Targets as for trace. With none, every process using the CUDA libraries
    found in the usual places (what `trace` probes by default): the node
    daemon's use (docs/fleet.md). Runs until SIGINT or SIGTERM, --duration,
    or the exit of `-- COMMAND` (or of every --pid). Exit status 2: bad input,
    or the address is taken.

    \b
    Examples:
      sudo cudaprobe serve --prometheus :9464
      sudo cudaprobe serve --prometheus 0.0.0.0:9464 --api driver
      sudo cudaprobe serve --prometheus :9464 --comm python3 -e memory,transfer,kernel
    """
    address = parse_listen_address(prometheus_at) if prometheus_at else None
    if address is None and not dump_bpf:
        raise UsageError("serve needs somewhere to serve: --prometheus [ADDR:]PORT")
    apis = APIS[api]
    functions = select_functions(list(events), apis)
    plan, settings, targets = plan_targets(functions, libs, apis, pids, comm, wait, command,
                                           dump_bpf)
    if dump_bpf:
        click.echo(bpfprog.render(plan.probes, settings))
        return
    metrics = CallMetrics()
    try:
        with MetricsServer(metrics, *address) as server:
            notify = announce(plan, targets, "counting")
            # said once the probes are in: from then on, what is scraped is being counted
            sink = MetricsSink(metrics, lambda: notify(f"serving Prometheus metrics on "
                                                       f"{server.url}"))
            session = TraceSession(plan, settings, sink, make_console(sys.stderr),
                                   SessionOptions(duration=duration, command=list(command),
                                                  targets=targets, notify=notify,
                                                  on_counters=metrics.set_lost))
            status = session.run()
    finally:
        if targets is not None:
            targets.close()
    if status:
        sys.exit(status)
