"""cudaprobe trace: one row per completed CUDA call, live."""

from __future__ import annotations

import functools

import click

from cudaprobe.commands.options import (
    StartsCommand,
    probe_options,
    py_stacks_option,
    run_probing,
)
from cudaprobe.commands.otlp_options import otlp_config, otlp_options
from cudaprobe.commands.trace_options import check_conflicts, output_options
from cudaprobe.output.formats import FORMATS, choose_format
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import select_functions
from cudaprobe.sessions.gputime import check_gpu_time
from cudaprobe.sessions.probing import ProbeRequest
from cudaprobe.sessions.tracing import TraceRequest, run_trace


@click.command("trace", cls=StartsCommand, context_settings={"show_default": True})
@probe_options(events="trace")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format: json is one document ({\"calls\": [...], \"summary\": "
                   "{...}}), jsonl a line per call. Default: from the -o extension (.jsonl, "
                   ".json, .csv, .chrome.json), else table.")
@click.option("-o", "--output", metavar="FILE",
              help="Write calls to FILE (created 0600); FILE.gz: gzip-compressed, the "
                   "format from the name before .gz (run.chrome.json.gz).")
@click.option("--force", is_flag=True, help="Overwrite an existing -o FILE.")
@click.option("--errors-only", is_flag=True, help="Only calls that returned an error.")
@click.option("--gpu-time", is_flag=True,
              help="The GPU time of each launch, copy and memset, through CUPTI (rows are "
                   "written when tracing ends); with --pid/--comm the library is injected "
                   "into the running process, and CUPTI is taken out of it at the end "
                   "(docs/gputime.md).")
@py_stacks_option
@output_options
@otlp_options
def trace_command(probe: ProbeRequest, fmt, output, force, errors_only, gpu_time, py_stacks,
                  mode, max_size, strict, ringbuf_pages, **otlp) -> None:
    """Trace CUDA API calls: one row per completed call, then a summary.

    With `-- COMMAND`, start COMMAND and trace it and every process it
    starts, until the last of them has exited (as strace -f), and exit with
    COMMAND's exit status. Options end at COMMAND's name, as strace's do:
    `trace python3 -c 'print(1)'` runs python3 -c. With --pid or --comm,
    attach to processes
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
      sudo cudaprobe trace --gpu-time --pid 31337 -d 5 -o calls.jsonl
      sudo cudaprobe trace --py-stacks -o calls.jsonl -- python train.py
      sudo cudaprobe trace --otlp http://collector:4318 --otlp-slow 1ms -- python train.py
      cudaprobe trace --dump-bpf -e transfer
    """
    check_conflicts(output, probe.dump_bpf, force=force, mode=mode, duration=probe.duration,
                    strict=strict, **{"max-size": max_size})
    otlp = otlp_config(**otlp)
    if gpu_time:
        check_gpu_time(list(probe.command), probe.pids, probe.comm)
    request = TraceRequest(choose_format(fmt, output), output, force, mode, max_size, strict,
                           gpu_time, otlp)
    run_probing(probe, select_functions(list(probe.events), set(probe.apis)),
                functools.partial(run_trace, request=request), errors_only=errors_only,
                ringbuf_pages=ringbuf_pages or bpfprog.Settings.ringbuf_pages,
                py_stacks=py_stacks)
