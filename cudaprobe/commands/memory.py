"""cudaprobe memory: CUDA allocations and frees per process, live bytes, and leaks at exit."""

from __future__ import annotations

import json

import click

from cudaprobe.analysis.memtrack import memory_functions
from cudaprobe.commands.options import (
    Seconds,
    StartsCommand,
    probe_options,
    py_stacks_option,
    report_file_options,
    run_probing,
)
from cudaprobe.output.memory_view import render_exit, render_processes, render_summary, to_dict
from cudaprobe.output.report_files import report_output, write_report
from cudaprobe.output.table import make_console
from cudaprobe.sessions.memory import MemoryOptions, MemorySession
from cudaprobe.sessions.probing import ProbeRequest, Probing


@click.command("memory", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events=None)
@click.option("--stacks", is_flag=True,
              help="Record each allocation's user stack: callers under the call site "
                   "(needs frame pointers in the calling code).")
@py_stacks_option
@click.option("-i", "--interval", metavar="SECONDS",
              type=Seconds(0.1, "tables faster than that scroll by unread, and cost the "
                                "tracing its time"),
              help="Show live bytes per process every SECONDS.")
@report_file_options("docs/memory.md")
def memory_command(probe: ProbeRequest, stacks, py_stacks, interval, fmt, as_json, output,
                   force) -> None:
    """Track CUDA memory: allocations and frees at the runtime and driver layers
    (a cudaMalloc that the driver serves as cuMemAlloc_v2 counts once), by
    kind: device, host-pinned, managed, async-pool (cudaMallocAsync, pools),
    vmm (physical memory of cuMemCreate, live until released and unmapped:
    PyTorch's expandable segments), host-registered. Live and peak bytes per
    process; when a process exits, the allocations it never freed, biggest
    first, grouped by call site. Failed allocations and frees change nothing;
    memory freed by cudaDeviceReset or cuCtxDestroy is reported as freed
    implicitly. With --py-stacks, a call site begins with the Python line that
    made the allocation (its program's own innermost frame): each leak, and
    the memory live at the peak, is grouped by it.

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
      sudo cudaprobe memory --py-stacks -- python train.py
      sudo cudaprobe memory -o memory.json -- ./my_app
    """
    command = list(probe.command)

    def session(probing: Probing) -> int:
        stream, json_out, human = report_output(output, force, fmt, as_json, bool(command))
        notify = probing.begin("tracking memory:")
        memory: MemorySession

        def live(s: MemorySession) -> None:
            running = [p for p in s.accounting.processes.values() if not p.exited]
            if running:
                render_processes(running, human, "live CUDA memory")

        memory = MemorySession(probing.plan, probing.settings, MemoryOptions(
            command=command, targets=probing.targets, notify=notify, duration=probe.duration,
            interval=interval, stacks=stacks),
            on_exit=lambda p: render_exit(p, human, memory.ms), on_interval=live)
        status = memory.run()
        processes = list(memory.accounting.processes.values())

        def write() -> None:
            render_summary(processes, memory.lost, memory.in_flight, memory.duration_s, human)
            if output or json_out:
                if json_out:
                    stream.write(json.dumps(to_dict(processes, memory.lost, memory.in_flight,
                                                    memory.duration_s, memory.libraries,
                                                    memory.ms), indent=2) + "\n")
                else:
                    for p in processes:
                        render_exit(p, make_console(stream), memory.ms)
                stream.close()

        return write_report(write, status, bool(command))

    run_probing(probe, memory_functions(set(probe.apis)), session, stacks=stacks,
                callers=True, py_stacks=py_stacks)
