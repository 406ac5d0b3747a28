"""cudaprobe trace: one row per completed CUDA call, live."""

from __future__ import annotations

import sys

import click

from cudaprobe.commands.options import (
    APIS,
    StartsCommand,
    announce,
    plan_targets,
    probe_options,
    py_stacks_option,
)
from cudaprobe.commands.otlp_options import otlp_config, otlp_options, with_otlp
from cudaprobe.commands.trace_options import STRICT_EXIT, check_conflicts, output_options
from cudaprobe.decode.symbolize import KernelSymbolizer
from cudaprobe.output.capped import SizeCapped
from cudaprobe.output.files import DEFAULT_MODE, StdoutStream, open_output
from cudaprobe.output.formats import FORMATS, REPORTERS, choose_format
from cudaprobe.output.status import StatusLine
from cudaprobe.output.status import wanted as status_line_wanted
from cudaprobe.output.table import make_console
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import select_functions
from cudaprobe.sessions.gputime import check_gpu_time
from cudaprobe.sessions.trace import SessionOptions, TraceSession


@click.command("trace", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events="trace")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format: json is one document ({\"calls\": [...], \"summary\": "
                   "{...}}), jsonl a line per call. Default: from the -o extension (.jsonl, "
                   ".json, .csv, .chrome.json), else table.")
@click.option("-o", "--output", metavar="FILE", help="Write calls to FILE (created 0600).")
@click.option("--force", is_flag=True, help="Overwrite an existing -o FILE.")
@click.option("--errors-only", is_flag=True, help="Only calls that returned an error.")
@click.option("--gpu-time", is_flag=True,
              help="With -- COMMAND: the GPU time of each launch, copy and memset, through "
                   "CUPTI (rows are written when COMMAND exits; docs/gputime.md).")
@py_stacks_option
@output_options
@otlp_options
def trace_command(libs, events, api, fmt, output, force, duration, errors_only, gpu_time,
                  py_stacks, mode, max_size, strict, ringbuf_pages, dump_bpf, pids, comm, wait,
                  command, **otlp) -> None:
    """Trace CUDA API calls: one row per completed call, then a summary.

    With `-- COMMAND`, start COMMAND and trace it and every process it
    starts, until the last of them has exited (as strace -f), and exit with
    COMMAND's exit status. Options end at COMMAND's name, as strace's do:
    `trace python3 -c 'print(1)'` runs python3 -c. With --pid or --comm, attach to processes
    already running (no --lib needed: what they map is probed, and libraries
    they load later too); --pid stops when its processes have exited.
    Otherwise trace every process using the libraries, until Ctrl-C or
    --duration.

    cudaprobe never signals COMMAND. One line says how the trace ended.
    Stopped while COMMAND or a process it started runs on (SIGINT, SIGTERM
    or SIGHUP sent to cudaprobe alone, or --duration), it exits 128+N for
    signal N, 124 after --duration; Ctrl-C at a terminal reaches both, and
    COMMAND's own status is returned if it exits too. A stop signal during
    the drain at the end cuts it short: what was decoded is written, the rest
    counted as lost, exit 128+N. Exit status 2: bad input, said in one line;
    3: events were lost and --strict was given.

    Rows go to stdout, or with `-- COMMAND` to stderr (as strace writes its
    trace), so that the command keeps stdout; -o FILE (`-o -`: stdout)
    chooses. At a terminal the table fits its width: at 80 columns TIME,
    PROCESS, PID, EVENT and DETAILS, which then begins with an error's name
    and ends with the latency. While the rows go to a file or a pipe and
    stderr is a terminal, a status line there shows the time, calls a
    second, rows written and events lost.

    \b
    Examples:
      sudo cudaprobe trace -- ./my_app --its-args
      sudo cudaprobe trace -c './my_app --its-args' -o calls.json
      sudo cudaprobe trace --lib /usr/local/cuda/lib64/libcudart.so -d 10
      sudo cudaprobe trace --pid 31337 -o calls.jsonl
      sudo cudaprobe trace --comm python3 -e kernel,transfer
      sudo cudaprobe trace -e memory,cudaLaunchKernel -o calls.jsonl -- python train.py
      sudo cudaprobe trace --errors-only
      sudo cudaprobe trace --gpu-time -o calls.jsonl -- python train.py
      sudo cudaprobe trace --py-stacks -o calls.jsonl -- python train.py
      sudo cudaprobe trace --otlp http://collector:4318 --otlp-slow 1ms -- python train.py
      cudaprobe trace --dump-bpf -e transfer
    """
    check_conflicts(output, dump_bpf, force=force, mode=mode, duration=duration,
                    strict=strict, **{"max-size": max_size})
    otlp = otlp_config(**otlp)
    if gpu_time:
        check_gpu_time(list(command))
    fmt = choose_format(fmt, output)
    apis = APIS[api]
    functions = select_functions(list(events), apis)
    ringbuf_pages = ringbuf_pages or bpfprog.Settings.ringbuf_pages
    plan, settings, targets = plan_targets(functions, libs, apis, pids, comm, wait, command,
                                           dump_bpf, errors_only=errors_only,
                                           ringbuf_pages=ringbuf_pages, py_stacks=py_stacks)
    if dump_bpf:
        click.echo(bpfprog.render(plan.probes, settings))
        return
    stream = open_output(output, force, mode or DEFAULT_MODE, command=bool(command))
    notify = announce(plan, targets, "tracing")
    status_line = None
    if status_line_wanted(stream.isatty(), sys.stderr):
        status_line = StatusLine(make_console(sys.stderr), output if output and output != "-"
                                 else stream.name)
        notify = status_line.say_through(notify)
    reporter = REPORTERS[fmt](stream)
    if gpu_time:
        reporter.gpu_time = True
    if max_size:
        reporter = SizeCapped(reporter, stream, max_size, notify)
    reporter, on_counters = with_otlp(reporter, otlp, notify)
    # the table shows its own summary; other formats get the human one on stderr
    err = make_console(sys.stderr)
    summary_console = None if fmt == "table" else err
    if fmt == "table" and not isinstance(stream, StdoutStream):  # StderrStream is one
        summary_console = err
    kernels = KernelSymbolizer.for_session(list(command), [a.path for a in plan.attachments])
    session = TraceSession(plan, settings, reporter, summary_console,
                           SessionOptions(duration=duration, command=list(command),
                                          symbolize=kernels, see_process=kernels.see,
                                          targets=targets, notify=notify,
                                          on_counters=on_counters, output=stream,
                                          gpu_time=gpu_time, status=status_line))
    try:
        status = session.run()
    finally:
        if targets is not None:
            targets.close()
        stream.close()
    lost = session.summary.total_lost + sum(session.summary.undelivered.values())
    if strict and lost:
        notify(f"{lost} events lost: exit {STRICT_EXIT} (--strict)")
        sys.exit(STRICT_EXIT)
    if status:
        sys.exit(status)

