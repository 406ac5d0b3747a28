"""cudaprobe list: the catalogue of traceable functions."""

from __future__ import annotations

import sys

import click
from rich.table import Table
from rich.text import Text

from cudaprobe.catalogue.count import count_text
from cudaprobe.catalogue.functions import HOT, is_default
from cudaprobe.commands.completion import complete_events
from cudaprobe.output.table import make_console
from cudaprobe.probe.plan import ALL, select_functions
from cudaprobe.sessions.probing import APIS, resolve_libraries
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.libs import discover_libraries


def _default_text(name: str, category: str) -> str:
    if is_default(name, category):
        return "yes"
    return "no (hot)" if name in HOT else "no"


@click.command("list")
@click.option("-e", "--events", multiple=True, metavar="LIST", shell_complete=complete_events,
              help="Only these functions or categories, comma-separated: names, globs "
                   "(any case), or a word found in names (malloc).")
@click.option("--api", type=click.Choice(sorted(APIS)), default="all",
              help="Which API's functions.")
@click.option("--lib", "libs", multiple=True, metavar="PATH",
              help="Count EXPORTED in this library (repeatable); default: those found.")
def list_command(events, api, libs) -> None:
    """List the CUDA and NCCL functions cudaprobe can trace, with their arguments.

    \b
    Examples:
      cudaprobe list
      cudaprobe list -e memory,transfer
      cudaprobe list -e 'cudaMemcpy*'
      cudaprobe list -e malloc
      cudaprobe list -e vmm,pool --lib /usr/lib/x86_64-linux-gnu/libcuda.so.1
      cudaprobe list --api nccl

    Every function the CUDA headers and nccl.h declare is listed, with its category;
    DEFAULT says whether trace, stats and serve probe it without -e (getters
    and the hot getters are left out: -e all adds them); EXPORTED how many of
    its symbols the libraries found here export ("-" with none found; a
    function that none exports cannot be traced with these libraries). The
    last line counts functions and symbols as trace and doctor do.
    """
    apis = APIS[api]
    exported: set[str] | None = None
    libraries = resolve_libraries(libs, apis) if libs else discover_libraries(apis)
    if libraries:
        exported = {s for path in libraries for s in read_symbols(path).functions}
    table = Table(show_edge=False)
    for col in ("FUNCTION", "API", "CATEGORY", "DEFAULT", "EXPORTED", "ARGUMENTS",
                "SYMBOLS PROBED"):
        table.add_column(col)
    functions = select_functions(list(events) or [ALL], apis, search=True)
    found = 0
    for fn in functions:
        args = ", ".join(f"{a.name}:{a.kind.value}" for a in fn.args)
        have = "-" if exported is None else sum(s in exported for s in fn.symbols)
        found += have if isinstance(have, int) else 0
        table.add_row(Text(fn.name), fn.api, fn.category, _default_text(fn.name, fn.category),
                      f"{have}/{len(fn.symbols)}" if exported is not None else "-", Text(args),
                      " ".join(fn.symbols))
    console = make_console(sys.stdout)
    console.print(table)
    where = ", ".join(libraries) if libraries else "no library found"
    counted = count_text([f.name for f in functions], [s for f in functions for s in f.symbols])
    console.print(Text(f"{counted}; {found} of them exported by {where}"))
