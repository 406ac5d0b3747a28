"""cudaprobe trace: one row per completed CUDA call, live."""

from __future__ import annotations

import os
import sys

import click

from .. import bpfprog, environment
from ..catalogue import DRIVER, RUNTIME
from ..errors import LibraryNotFound, NotRoot
from ..libs import discover_libraries, resolve_lib_arg
from ..output import open_output
from ..probes import plan_probes, select_functions
from ..reporters import FORMATS, REPORTERS, choose_format
from ..reporters.table import make_console
from ..session import SessionOptions, TraceSession
from ..symbolize import KernelSymbolizer

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
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def trace_command(libs, events, api, fmt, output, force, duration, errors_only, dump_bpf,
                  command) -> None:
    """Trace CUDA API calls: one row per completed call, then a summary.

    With `-- COMMAND`, start COMMAND, trace only it (and its children), and
    exit with its exit status. Without it, trace every process using the
    libraries until Ctrl-C or --duration.

    \b
    Examples:
      sudo cudaprobe trace -- ./my_app --its-args
      sudo cudaprobe trace --lib /usr/local/cuda/lib64/libcudart.so -d 10
      sudo cudaprobe trace -e memory,cudaLaunchKernel -o calls.jsonl -- python train.py
      sudo cudaprobe trace --errors-only
      cudaprobe trace --dump-bpf -e transfer
    """
    if output and fmt is None and output != "-":
        fmt = choose_format(None, output)
    fmt = choose_format(fmt, output)
    apis = APIS[api]
    functions = select_functions(list(events), apis)
    settings = bpfprog.Settings(filter_pid=bool(command), errors_only=errors_only)
    if not dump_bpf and os.geteuid() != 0:
        raise NotRoot()
    plan = plan_probes(functions, resolve_libraries(libs, apis))
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
    err.print(f"cudaprobe: tracing {len(plan.probes)} functions in "
              f"{', '.join(sorted({a.path for a in plan.attachments}))}", style="dim")
    kernels = KernelSymbolizer()
    session = TraceSession(plan, settings, reporter, summary_console,
                           SessionOptions(duration=duration, command=list(command),
                                          symbolize=kernels, see_process=kernels.see))
    try:
        status = session.run()
    finally:
        close = getattr(stream, "close", None)
        if close and stream is not sys.stdout:
            close()
    if status:
        sys.exit(status)

