"""Options that stats and memory share with trace: which libraries, functions and
API to probe, and `-- COMMAND`."""

from __future__ import annotations

from typing import Callable

import click

from .trace import APIS


def probe_options(events: str | None) -> Callable[[Callable], Callable]:
    """--lib, -e/--events (help: `events`, or none), --api, -d/--duration, --dump-bpf,
    and `-- COMMAND`."""
    options = [
        click.option("--lib", "libs", multiple=True, metavar="PATH",
                     help="CUDA library to probe: a path, a directory, or a soname. "
                          "Repeatable. Default: the libraries found in the usual places."),
    ]
    if events:
        options.append(click.option("-e", "--events", multiple=True, metavar="LIST", help=events))
    options += [
        click.option("--api", type=click.Choice(sorted(APIS)), default="all",
                     help="Runtime (libcudart), driver (libcuda), or both."),
        click.option("-d", "--duration", type=click.FloatRange(min=0, min_open=True),
                     metavar="SECONDS", help="Stop after this many seconds."),
        click.option("--dump-bpf", is_flag=True,
                     help="Print the BPF program and exit (no root needed)."),
        click.argument("command", nargs=-1, type=click.UNPROCESSED),
    ]

    def decorate(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
