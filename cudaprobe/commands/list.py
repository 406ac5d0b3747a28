"""cudaprobe list: the catalogue of traceable functions."""

from __future__ import annotations

import sys

import click
from rich.table import Table
from rich.text import Text

from cudaprobe.catalogue.count import count_text
from cudaprobe.catalogue.functions import DRIVER, HOT, RUNTIME
from cudaprobe.commands.completion import complete_events
from cudaprobe.output.table import make_console
from cudaprobe.probe.plan import ALL, select_functions


@click.command("list")
@click.option("-e", "--events", multiple=True, metavar="LIST", shell_complete=complete_events,
              help="Only these functions or categories, comma-separated.")
@click.option("--api", type=click.Choice(["runtime", "driver", "all"]), default="all",
              help="Which API's functions.")
def list_command(events, api) -> None:
    """List the CUDA functions cudaprobe can trace, with their arguments.

    \b
    Examples:
      cudaprobe list
      cudaprobe list -e memory,transfer
      cudaprobe list -e 'cudaMemcpy*'

    Every function is listed; DEFAULT says whether trace, stats and serve
    probe it without -e (the hot getters are left out: -e all adds them).
    The last line counts them as trace and doctor do: functions, and the
    symbols (variants such as _ptsz, _v2) that are probed for them.
    """
    apis = {RUNTIME, DRIVER} if api == "all" else {api}
    functions = select_functions(list(events) or [ALL], apis)
    table = Table(show_edge=False, caption_justify="left", caption=count_text(
        [f.name for f in functions], [s for f in functions for s in f.symbols]))
    for col in ("FUNCTION", "API", "CATEGORY", "DEFAULT", "ARGUMENTS", "SYMBOLS PROBED"):
        table.add_column(col)
    for fn in functions:
        args = ", ".join(f"{a.name}:{a.kind.value}" for a in fn.args)
        default = "no (hot)" if fn.name in HOT else "yes"
        table.add_row(Text(fn.name), fn.api, fn.category, default, Text(args),
                      " ".join(fn.symbols))
    make_console(sys.stdout).print(table)
