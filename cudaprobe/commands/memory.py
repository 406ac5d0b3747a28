"""cudaprobe memory: CUDA allocations and frees per process, live bytes, and leaks at exit."""

from __future__ import annotations

import json
import sys

import click

from cudaprobe.analysis.memtrack import memory_functions
from cudaprobe.commands.options import (
    APIS,
    Seconds,
    StartsCommand,
    announce,
    plan_targets,
    probe_options,
    report_file_options,
    report_output,
    write_report,
)
from cudaprobe.output.memory_view import render_exit, render_processes, render_summary, to_dict
from cudaprobe.output.table import make_console
from cudaprobe.probe import bpfprog
from cudaprobe.sessions.memory import MemoryOptions, MemorySession


@click.command("memory", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events=None)
@click.option("--stacks", is_flag=True,
              help="Record each allocation's user stack: callers under the call site "
                   "(needs frame pointers in the calling code).")
@click.option("-i", "--interval", type=Seconds(), metavar="SECONDS",
              help="Show live bytes per process every SECONDS.")
@report_file_options("docs/memory.md")
def memory_command(libs, api, duration, dump_bpf, pids, comm, wait, command, stacks, interval,
                   fmt, as_json, output, force) -> None:
    """Track CUDA memory: allocations and frees at the runtime and driver layers
    (a cudaMalloc that the driver serves as cuMemAlloc_v2 counts once), by
    kind: device, host-pinned, managed, async-pool (cudaMallocAsync, pools),
    vmm (physical memory of cuMemCreate, live until released and unmapped:
    PyTorch's expandable segments), host-registered. Live and peak bytes per
    process; when a process exits, the allocations it never freed, biggest
    first, grouped by call site. Failed allocations and frees change nothing;
    memory freed by cudaDeviceReset or cuCtxDestroy is reported as freed
    implicitly.

    With `-- COMMAND`, start COMMAND, track it and every process it starts
    until the last has exited, and exit with its exit status. With --pid or
    --comm, attach to processes already running (what they allocated before
    is not known: its frees count as unknown); --pid stops when they have
    exited. Else track every process until Ctrl-C or --duration.

    \b
    Examples:
      sudo cudaprobe memory -- ./my_app
      sudo cudaprobe memory --pid 31337 --interval 5
      sudo cudaprobe memory --stacks --interval 5 -- python train.py
      sudo cudaprobe memory -o memory.json -- ./my_app
    """
    apis = APIS[api]
    plan, settings, targets = plan_targets(memory_functions(apis), libs, apis, pids, comm, wait,
                                           command, dump_bpf, stacks=stacks,
                                           callers=True)
    if dump_bpf:
        click.echo(bpfprog.render(plan.probes, settings))
        return
    stream, as_json, human = report_output(output, force, fmt, as_json)
    notify = announce(plan, targets, "tracking memory:")
    session: MemorySession

    def live(s: MemorySession) -> None:
        running = [p for p in s.accounting.processes.values() if not p.exited]
        if running:
            render_processes(running, human, "live CUDA memory")

    session = MemorySession(plan, settings, MemoryOptions(
        command=list(command), targets=targets, notify=notify, duration=duration,
        interval=interval, stacks=stacks),
        on_exit=lambda p: render_exit(p, human, session.ms), on_interval=live)
    try:
        status = session.run()
    finally:
        if targets is not None:
            targets.close()
    processes = list(session.accounting.processes.values())

    def write() -> None:
        render_summary(processes, session.lost, session.in_flight, session.duration_s, human)
        if output or as_json:
            if as_json:
                stream.write(json.dumps(to_dict(processes, session.lost, session.in_flight,
                                                session.duration_s, session.libraries,
                                                session.ms), indent=2) + "\n")
            else:
                for p in processes:
                    render_exit(p, make_console(stream), session.ms)
            stream.close()

    status = write_report(write, status, bool(command))
    if status:
        sys.exit(status)
