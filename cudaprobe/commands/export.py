"""cudaprobe export: the trace as a script for another tool."""

from __future__ import annotations

import os
import shlex

import click

from cudaprobe.commands.completion import complete_events
from cudaprobe.commands.options import events_help
from cudaprobe.errors import CudaNotMapped, CudaprobeError, NotRoot
from cudaprobe.output.bpftrace import ExportOptions, render_script
from cudaprobe.output.files import open_output
from cudaprobe.probe.plan import plan_probes, select_functions
from cudaprobe.sessions.probing import APIS, resolve_libraries
from cudaprobe.targets.openfile import OpenedFile
from cudaprobe.targets.selection import Targets, initial_libraries


@click.group("export")
def export_group() -> None:
    """Export a trace as a script that runs without cudaprobe."""


def _libraries_of(pids: tuple[int, ...], symbols: list[str], apis: set[str]) -> tuple[
        list[OpenedFile], list[int]]:
    """What the processes map that defines a traced symbol, as `trace --pid` finds it;
    and their process ids (a thread id names its process)."""
    targets = Targets(symbols, pids)
    try:
        return initial_libraries(targets, apis, [], wait=False), sorted(targets.requested)
    except CudaNotMapped as e:
        raise CudaprobeError(e.message, fix="name the library with --lib") from None
    finally:
        targets.close()


def _command_line(libs: list[str], events: tuple[str, ...], api: str, pids: list[int],
                  summary: bool, output: str | None) -> str:
    """The export as a command line, with the libraries it resolved to."""
    argv = ["cudaprobe", "export", "bpftrace"]
    for lib in libs:
        argv += ["--lib", lib]
    if events:
        argv += ["--events", ",".join(events)]
    if api != "all":
        argv += ["--api", api]
    for pid in pids:
        argv += ["--pid", str(pid)]
    if summary:
        argv.append("--summary")
    if output:
        argv += ["-o", os.path.basename(output)]
    return shlex.join(argv)


@export_group.command("bpftrace", context_settings={"show_default": True})
@click.option("--lib", "libs", multiple=True, metavar="PATH",
              help="CUDA library to probe: a path, a directory, or a soname. Repeatable. "
                   "Default: what the --pid processes map, else the libraries found in the "
                   "usual places.")
@click.option("-p", "--pid", "pids", multiple=True, type=click.IntRange(min=1), metavar="PID",
              help="Only trace this process, probing the CUDA code it maps (needs root). "
                   "Repeatable.")
@click.option("-e", "--events", multiple=True, metavar="LIST", shell_complete=complete_events,
              help=events_help("trace"))
@click.option("--api", type=click.Choice(sorted(APIS)), default="all",
              help="Runtime (libcudart), driver (libcuda), NCCL (libnccl), or all.")
@click.option("--summary", is_flag=True,
              help="Instead of a line per call: counts, latency histograms and errors per "
                   "function, printed at exit.")
@click.option("-o", "--output", metavar="FILE",
              help="Write the script to FILE, executable, instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite an existing -o FILE.")
def bpftrace_command(libs, pids, events, api, summary, output, force) -> None:
    """Write a bpftrace script that traces what `cudaprobe trace` would.

    The script probes the same functions, chosen by the same options, and
    prints one line per completed call: its latency, result and decoded
    arguments. It needs bpftrace 0.17 or newer, and neither cudaprobe,
    Python nor bcc. Exporting needs no root unless --pid is given.

    \b
    Examples:
      cudaprobe export bpftrace --lib /usr/local/cuda/lib64/libcudart.so -o cuda_events.bt
      sudo ./cuda_events.bt -c './my_app --its-args'
      cudaprobe export bpftrace -e memory,kernel --summary -o cuda_summary.bt
      sudo cudaprobe export bpftrace --pid 31337 -e transfer | sudo bpftrace -
    """
    apis = APIS[api]
    functions = select_functions(list(events), apis)
    if pids and os.geteuid() != 0:
        raise NotRoot("export --pid")
    libraries: list[str | OpenedFile] = list(
        resolve_libraries(libs, apis) if libs or not pids else [])
    if pids:
        found, pids = _libraries_of(pids, [s for f in functions for s in f.symbols], apis)
        libraries = libraries or list(found)
    plan = plan_probes(functions, libraries)
    names = [lib if isinstance(lib, str) else lib.name for lib in libraries]
    options = ExportOptions(pids=tuple(pids), summary=summary,
                            command=_command_line(names, events, api, pids, summary, output))
    to_file = bool(output) and output != "-"
    stream = open_output(output, force)
    stream.write(render_script(plan, options, os.path.basename(output) if to_file else None))
    stream.close()
    if to_file:
        os.chmod(output, 0o755)
