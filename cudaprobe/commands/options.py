"""What the probing commands share: the options that say which libraries,
functions and API to probe and which processes (`-- COMMAND`, --pid, --comm),
the runner around every probing session (run_probing), and the report files
of stats and memory."""

from __future__ import annotations

import functools
import math
import shlex
import sys
from typing import Callable

import click

from cudaprobe.catalogue.functions import HOT, Function
from cudaprobe.commands.completion import complete_events
from cudaprobe.errors import UsageError
from cudaprobe.output.formats import REPORT_EXTENSIONS, choose_format
from cudaprobe.probe import bpfprog
from cudaprobe.sessions.probing import APIS, ProbeRequest, Probing, plan_targets


class Seconds(click.ParamType):
    """A time in seconds: a positive, finite number (float() takes `nan` and
    `inf`, which would never end a --duration)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, why: str = "") -> None:
        self.minimum = minimum  # 0: any time above 0
        self.why = why  # what a shorter time would do, said with the minimum

    def convert(self, value, param, ctx) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds > 0):
            self.fail(f"{value!r} is not a number of seconds above 0", param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value!r} is less than {self.minimum:g} s: {self.why}", param, ctx)
        return seconds


class StartsCommand(click.Command):
    """A command that takes `-- COMMAND`: its options end at the command's name,
    as strace's do (`trace python3 -c 'print(1)'` runs python3 with -c), and
    a `--` with nothing after it is an error, not a trace of every process."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("context_settings", {})
        kwargs["context_settings"].setdefault("allow_interspersed_args", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[-1] == "--" and not self._takes_value(args[-2:-1]):
            raise UsageError("-- needs a command after it (`-- ./my_app --its-args`)")
        return super().parse_args(ctx, args)

    def _takes_value(self, before: list[str]) -> bool:
        """Whether the word before a last `--` is an option whose value it is (`-e --`)."""
        if not before:
            return False
        word = before[0]
        return any(isinstance(p, click.Option) and not p.is_flag
                   and word in p.opts + p.secondary_opts for p in self.params)


class FiniteRange(click.FloatRange):
    """A FloatRange that takes no `nan` (every comparison with it is false, so
    FloatRange lets it through) and no `inf`."""

    def convert(self, value, param, ctx) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def events_help(verb: str) -> str:
    return (f"Functions to {verb}, comma-separated: names, categories, globs ('cudaMemcpy*') "
            f"or `all`; `!ITEM` leaves one out ('memory,!cudaFree'). Default: the functions "
            f"that say something and are not called per launch: no getters, queries, "
            f"attributes, textures, occupancy, nor the hot getters ({', '.join(sorted(HOT))}). "
            f"`cudaprobe list` shows which (DEFAULT).")


def probe_options(events: str | None) -> Callable[[Callable], Callable]:
    """--lib, -e/--events (`events`: the verb of its help, trace or count; or none),
    --api, -d/--duration, --dump-bpf, --pid, --comm, --wait and `-- COMMAND`: given
    to the command as one ProbeRequest, `probe`."""
    options = [
        click.option("--lib", "libs", multiple=True, metavar="PATH",
                     help="CUDA library to probe: a path, a directory, or a soname. "
                          "Repeatable. Default: the libraries found in the usual places."),
    ]
    if events:
        options.append(click.option("-e", "--events", multiple=True, metavar="LIST",
                                    shell_complete=complete_events, help=events_help(events)))
    options += [
        click.option("--api", type=click.Choice(sorted(APIS)), default="all",
                     help="Runtime (libcudart), driver (libcuda), NCCL (libnccl), or all."),
        click.option("-d", "--duration", type=Seconds(),
                     metavar="SECONDS",
                     help="Stop after this many seconds (with --gpu-time and --pid or "
                          "--comm: counted from when their GPU time is recorded)."),
        click.option("--dump-bpf", is_flag=True,
                     help="Print the BPF program and exit (no root needed)."),
        click.option("-p", "--pid", "pids", multiple=True, type=click.IntRange(min=1),
                     metavar="PID",
                     help="Attach to this running process (its threads and children too), "
                          "probing the CUDA code it maps; stop when it exits. Repeatable."),
        click.option("--comm", metavar="NAME",
                     help="Follow every process named NAME (as in /proc/PID/comm), running "
                          "now or started later."),
        click.option("--wait", is_flag=True,
                     help="With --pid: attach even if the process maps no CUDA code yet."),
        click.option("-c", "--cmd", metavar="CMD",
                     help="The command to start and trace, as one string split as the "
                          "shell would (bpftrace's -c): the same as `-- CMD...`."),
        click.argument("command", nargs=-1, type=click.UNPROCESSED,
                       shell_complete=complete_after_equals),
    ]

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def with_request(*args: object, libs: tuple[str, ...], api: str,
                         duration: float | None, dump_bpf: bool, pids: tuple[int, ...],
                         comm: str | None, wait: bool, cmd: str | None,
                         command: tuple[str, ...], events: tuple[str, ...] = (),
                         **kwargs: object) -> object:
            return f(*args, probe=ProbeRequest(
                libs=libs, events=events, apis=frozenset(APIS[api]), duration=duration,
                dump_bpf=dump_bpf, pids=pids, comm=comm, wait=wait,
                command=command_of(cmd, command)), **kwargs)

        for option in reversed(options):
            with_request = option(with_request)
        return with_request

    return decorate


def complete_after_equals(ctx: click.Context, param: click.Parameter,
                          incomplete: str) -> list:
    """`--events=mem<TAB>`: bash splits the word at `=`, so click sees `--events`
    take `=` as its value and `mem` as the command; complete it as -e's."""
    events = ctx.params.get("events") or ()
    return complete_events(ctx, param, incomplete) if events[-1:] == ("=",) else []


def command_of(cmd: str | None, command: tuple[str, ...]) -> tuple[str, ...]:
    """-c CMD, split as the shell would, or `-- COMMAND...`; not both."""
    if cmd is None:
        return command
    if command:
        raise UsageError("-c CMD and -- COMMAND both name the command: give one")
    try:
        words = tuple(shlex.split(cmd))
    except ValueError as e:  # an unclosed quote
        raise UsageError(f"-c {cmd!r}: {e}") from None
    if not words:
        raise UsageError("-c needs a command")
    return words


def run_probing(probe: ProbeRequest, functions: list[Function],
                session: Callable[[Probing], int], **settings: bool) -> None:
    """What every probing command does around its session: plan the probes and the
    processes to follow (`settings` added to the BPF settings); with --dump-bpf
    print the program and stop; else run `session` (which calls Probing.begin
    once its own files are open), let go of the processes whatever happens,
    and exit with the status it returns."""
    probing = plan_targets(functions, probe, **settings)
    try:
        if probe.dump_bpf:
            click.echo(bpfprog.render(probing.plan.probes, probing.settings))
            return
        status = session(probing)
    finally:
        probing.close()
    if status:
        sys.exit(status)


def report_file_options(schema_doc: str) -> Callable[[Callable], Callable]:
    """-f/--format, -o/--output and --force (and --json, hidden, the old name of
    `-f json`): the options report_output() takes."""
    options = [
        click.option("-f", "--format", "fmt", type=click.Choice(sorted(REPORT_EXTENSIONS)),
                     default=None,
                     help=f"Format of the report: a table, or one JSON document (schema: "
                          f"{schema_doc}). Default: from the -o extension (.json), else table."),
        click.option("--json", "as_json", is_flag=True, hidden=True,
                     help="The same as `-f json` (deprecated)."),
        click.option("-o", "--output", metavar="FILE",
                     help="Write the report to FILE (created 0600); FILE.gz: "
                          "gzip-compressed."),
        click.option("--force", is_flag=True, help="Overwrite an existing -o FILE."),
    ]

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def checked(*args: object, fmt: str | None, output: str | None, as_json: bool,
                    **kwargs: object) -> object:
            check_report_format(fmt, output, as_json)  # before anything runs
            return f(*args, fmt=fmt, output=output, as_json=as_json, **kwargs)

        for option in reversed(options):
            checked = option(checked)
        return checked

    return decorate


def check_report_format(fmt: str | None, output: str | None, as_json: bool) -> None:
    """An -o extension that names a format only `trace` writes (.csv, .jsonl,
    .chrome.json), with no -f: one line, not a table under that name."""
    if fmt is None and not as_json and output and output != "-":
        named = choose_format(None, output)
        if named not in REPORT_EXTENSIONS:
            raise UsageError(f"-o {output!r} names the {named} format, which only `trace` "
                             "writes: this report is a table or JSON (-o FILE.json, or "
                             "-f table)")


py_stacks_option = click.option(
    "--py-stacks", is_flag=True,
    help="Each call made by a thread running Python carries that thread's Python stack, "
         "read by the probe at the call (CPython 3.9-3.13; docs/pystacks.md).")
