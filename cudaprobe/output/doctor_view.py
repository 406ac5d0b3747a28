"""`cudaprobe doctor`'s report as the terminal shows it: a table of the checks,
then whether tracing will work."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.doctor.checks import FAIL, OK, WARN, Check
from cudaprobe.output.text import escape

STYLES = {OK: "green", WARN: "yellow", FAIL: "bold red"}


def render_checks(checks: list[Check], console: Console) -> None:
    table = Table(show_edge=False, title="cudaprobe doctor", title_justify="left")
    for col in ("CHECK", "STATUS", "FOUND", "FIX"):
        table.add_column(col, overflow="fold")
    # Text(): paths and versions may hold [ ], which is rich markup; escaped: and
    # control characters (a path under a user's directory is the user's to name)
    for c in checks:
        table.add_row(Text(c.name), Text(c.status.upper(), style=STYLES[c.status]),
                      Text(escape(c.found)), Text(escape(c.fix)))
    console.print(table)
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        console.print(Text(f"tracing will not work: fix {', '.join(failed)}", style="bold red"))
    else:
        console.print(Text("tracing will work", style="green"))
