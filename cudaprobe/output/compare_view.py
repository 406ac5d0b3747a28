"""`stats --compare`'s verdict as the terminal shows it: what moved beyond
the threshold, or a line saying nothing did."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.stats_compare import Change
from cudaprobe.output.text import escape, humanize_ns


def render_changes(changes: list[Change], console: Console, baseline: str,
                   threshold: float) -> None:
    if not changes:
        console.print(Text(f"compared with {escape(baseline)}: no count or p50 moved more "
                           f"than {threshold:g}%"))
        return
    table = Table(title=Text(f"moved more than {threshold:g}% since {escape(baseline)}"),
                  title_justify="left",
                  show_edge=False, header_style="bold")
    for col in ("EVENT", "METRIC", "BEFORE", "AFTER", "CHANGE"):
        table.add_column(col, justify="left" if col in ("EVENT", "METRIC") else "right")
    for c in changes:
        show = humanize_ns if c.metric == "p50_ns" else str
        pct = c.percent
        table.add_row(Text(escape(c.event)), c.metric.removesuffix("_ns"), show(c.before),
                      show(c.after),
                      Text("new" if pct is None else f"{pct:+.0f}%", style="bold red"))
    console.print(table)
