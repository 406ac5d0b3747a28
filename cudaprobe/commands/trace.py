"""cudaprobe trace: one row per completed CUDA call, live."""

from __future__ import annotations

import os
import sys

import click
from rich.text import Text

from .. import bpfprog, environment
from ..catalogue import DRIVER, RUNTIME
from ..errors import LibraryNotFound, NotRoot, UsageError
from ..libs import discover_libraries, resolve_lib_arg
from ..output import open_output
from ..probes import plan_probes, select_functions
from ..reporters import FORMATS, REPORTERS, choose_format
from ..reporters.table import make_console
from ..session import SessionOptions, TraceSession
from ..symbolize import KernelSymbolizer
from ..targets import Targets, initial_libraries

APIS = {"runtime": {RUNTIME}, "driver": {DRIVER}, "all": {RUNTIME, DRIVER}}


def resolve_libraries(libs: tuple[str, ...], apis: set[str]) -> list[str]:
    if libs:
        return sorted({p for arg in libs for p in resolve_lib_arg(arg)})
    found = discover_libraries(apis)
    if not found:
        raise LibraryNotFound("(default search)", "no libcudart/libcuda found; name one with --lib")
    return found


@click.command("trace", context_settings={"show_default": True})
@click.option("--lib", "libs", multiple=True, metavar="PATH",
              help="CUDA library to probe: a path, a directory, or a soname. Repeatable. "
                   "Default: the libraries found in the usual places.")
@click.option("-e", "--events", multiple=True, metavar="LIST",
              help="Functions or categories to trace, comma-separated "
                   "(see `cudaprobe list`). Default: all.")
@click.option("--api", type=click.Choice(sorted(APIS)), default="all",
              help="Runtime (libcudart), driver (libcuda), or both.")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format. Default: from the -o extension, else table.")
@click.option("-o", "--output", metavar="FILE", help="Write calls to FILE (created 0600).")
@click.option("--force", is_flag=True, help="Overwrite an existing -o FILE.")
@click.option("-d", "--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this many seconds.")
@click.option("--errors-only", is_flag=True, help="Only calls that returned an error.")
@click.option("--dump-bpf", is_flag=True, help="Print the BPF program and exit (no root needed).")
@click.option("-p", "--pid", "pids", multiple=True, type=click.IntRange(min=1), metavar="PID",
              help="Attach to this running process (its threads and children too), probing "
                   "the CUDA code it maps; stop when it exits. Repeatable.")
@click.option("--comm", metavar="NAME",
              help="Trace every process named NAME (as in /proc/PID/comm), running now or "
                   "started later.")
@click.option("--wait", is_flag=True,
              help="With --pid: attach even if the process maps no CUDA code yet.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def trace_command(libs, events, api, fmt, output, force, duration, errors_only, dump_bpf,
                  pids, comm, wait, command) -> None:
    """Trace CUDA API calls: one row per completed call, then a summary.

    With `-- COMMAND`, start COMMAND, trace only it (and its children), and
    exit with its exit status. With --pid or --comm, attach to processes
    already running (no --lib needed: what they map is probed, and libraries
    they load later too); --pid stops when its processes have exited.
    Otherwise trace every process using the libraries, until Ctrl-C or
    --duration.

    \b
    Examples:
      sudo cudaprobe trace -- ./my_app --its-args
      sudo cudaprobe trace --lib /usr/local/cuda/lib64/libcudart.so -d 10
      sudo cudaprobe trace --pid 31337 -o calls.jsonl
      sudo cudaprobe trace --comm python3 -e kernel,transfer
      sudo cudaprobe trace -e memory,cudaLaunchKernel -o calls.jsonl -- python train.py
      sudo cudaprobe trace --errors-only
      cudaprobe trace --dump-bpf -e transfer
    """
    if output and fmt is None and output != "-":
        fmt = choose_format(None, output)
    fmt = choose_format(fmt, output)
    apis = APIS[api]
    functions = select_functions(list(events), apis)
    if command and (pids or comm):
        raise UsageError("-- COMMAND traces the process it starts: leave out --pid and --comm")
    if wait and not pids:
        raise UsageError("--wait goes with --pid")
    follow = bool(command or pids or comm)
    settings = bpfprog.Settings(filter_pid=follow, filter_comm=comm is not None,
                                errors_only=errors_only)
    if not dump_bpf and os.geteuid() != 0:
        raise NotRoot()
    targets = None
    if follow:
        targets = Targets([s for f in functions for s in f.symbols], pids, comm,
                          discover=not libs)
        libraries = resolve_libraries(libs, apis) if libs else initial_libraries(
            targets, apis, list(command), wait)
    else:
        libraries = resolve_libraries(libs, apis)
    plan = plan_probes(functions, libraries, every_symbol=follow)
    if dump_bpf:
        click.echo(bpfprog.render(plan.probes, settings))
        return
    stream = open_output(output, force)
    err = make_console(sys.stderr)
    for note in environment.prepare():
        err.print(f"cudaprobe: {note}", style="dim")
    reporter = REPORTERS[fmt](stream)
    # the table shows its own summary; other formats get the human one on stderr
    summary_console = None if fmt == "table" else err
    if fmt == "table" and stream is not sys.stdout:
        summary_console = err

    def notify(message: str) -> None:
        err.print(Text(f"cudaprobe: {message}", style="dim"))

    for note in targets.notes if targets else []:
        notify(note)
    paths = sorted({a.path for a in plan.attachments})
    functions_probed = len({a.probe.func_id for a in plan.attachments})
    notify(f"tracing {functions_probed} functions in {', '.join(paths)}" if paths
           else "no CUDA code mapped yet: probes go in as it is loaded")
    kernels = KernelSymbolizer()
    session = TraceSession(plan, settings, reporter, summary_console,
                           SessionOptions(duration=duration, command=list(command),
                                          symbolize=kernels, see_process=kernels.see,
                                          targets=targets, notify=notify))
    try:
        status = session.run()
    finally:
        if targets is not None:
            targets.close()
        close = getattr(stream, "close", None)
        if close and stream is not sys.stdout:
            close()
    if status:
        sys.exit(status)

