"""The end-of-trace summary as the terminal shows it: the table of calls per
function, the line of totals and losses, and what was not traced."""

from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.summary import ATTACH, GONE_UNPROBED, NOT_LOST, Summary, Untraced
from cudaprobe.output.text import cells, cut_middle, escape, humanize_ns

SHOWN_UNTRACED = 5  # said one by one; more are counted


_ERROR_PREFIX = re.compile(r"\b(?:cudaError|CUDA_ERROR_)(?=\w)")


def short_errors(text: str) -> str:
    """Errors named less their API's prefix (InsufficientDriver x3), where
    the terminal is short of room."""
    return _ERROR_PREFIX.sub("", text)


def describe_lost(lost: dict[str, int]) -> str:
    """`ringbuf_full=12, decode_errors=1`: the causes that happened."""
    return ", ".join(f"{k}={v}" for k, v in lost.items() if v and k not in NOT_LOST)


def span_text(seconds: float) -> str:
    """`3.50s`; under 10 ms, `0.42ms` (a child linked at its making)."""
    return f"{seconds:.2f}s" if seconds >= 0.01 else f"{seconds * 1000:.2f}ms"


def describe_span(u: Untraced) -> str:
    """What one span not traced left out, in a sentence."""
    if u.before == ATTACH:
        ran = f"ran {span_text(u.seconds)}" if u.seconds else "ran for a time not known"
        return (f"pid {u.pid} ({u.process}) {ran} before the "
                "attach: its calls until then, and those under way then, are not included")
    if u.before == GONE_UNPROBED:
        return (f"pid {u.pid} ({u.process}), a child of pid {u.parent} sharing its CUDA "
                "libraries (a fork without exec), was gone before its probes could be put in: "
                "any CUDA call it made is not included")
    return (f"pid {u.pid} ({u.process}) mapped {u.before} up to "
            f"{span_text(u.seconds)} before it was probed: its calls there until then are "
            "not included")


def describe_untraced(spans: list[Untraced]) -> list[str]:
    """The summary's lines about calls not seen: one per span, then a count."""
    lines = [f"not traced: {describe_span(u)}" for u in spans[:SHOWN_UNTRACED]]
    if len(spans) > SHOWN_UNTRACED:
        lines.append(f"not traced: {len(spans) - SHOWN_UNTRACED} more such spans (see --json "
                     "or the JSONL trailer's `untraced`)")
    return lines


def render_summary(summary: Summary, console: Console) -> None:
    """The table, a line per function at any width from 80: an error per line
    of its cell, never split (less its prefix where a name would be cut
    otherwise); names cut in the middle where the line is still short (the
    suffix stays: `cudaLaunchCoop…Kernel_ptsz`)."""
    by_total = sorted(summary.counts.items(), key=lambda kv: -kv[1].total_ns)
    rows = []
    for name, s in by_total:
        errors = "\n".join(f"{n} x{k}" for n, k in s.errors.most_common())
        avg = humanize_ns(s.total_ns // s.calls) if s.calls else "-"
        rows.append([escape(name), str(s.calls), humanize_ns(s.total_ns), avg, errors])
    titles = ("EVENT", "CALLS", "TOTAL", "AVG", "ERRORS")

    def widths_of(rows: list[list[str]]) -> tuple[list[int], int]:
        """Each column's widest cell, and the room EVENT has: each column's
        padding and rule take 3 characters, less the edge."""
        widths = [max([len(titles[i])] + [cells(line) for r in rows
                                           for line in r[i].split("\n")])
                  for i in range(len(titles))]
        return widths, max(len(titles[0]), console.width - sum(widths[1:]) - 3 * len(titles))

    widths, event_width = widths_of(rows)
    if widths[0] > event_width:  # the errors less their prefixes, for the names' sake
        rows = [[*r[:-1], short_errors(r[-1])] for r in rows]
        widths, event_width = widths_of(rows)
    table = Table(title="cudaprobe summary", title_justify="left", show_edge=False)
    for col, justify in zip(titles, ("left", "right", "right", "right", "left")):
        table.add_column(col, justify=justify, no_wrap=True)
    for name, *values in rows:
        table.add_row(Text(cut_middle(name, event_width)), *values[:-1], Text(values[-1]))
    console.print(table)
    lost = summary.total_lost
    line = f"{summary.total_calls} calls in {summary.duration_s:.2f}s, "
    if summary.total_rows != summary.total_calls:  # lost, or --errors-only
        line += f"{summary.total_rows} as rows, "
    line += f"{len(summary.in_flight)} still in flight, {lost} lost"
    if summary.exited_mid_call:
        line += f", {summary.exited_mid_call} ended with their thread"
    if lost:
        line += f" ({describe_lost(summary.lost)})"
    if undelivered := sum(summary.undelivered.values()):
        line += (f"; {undelivered} spans not delivered over OTLP "
                 f"({describe_lost(summary.undelivered)})")
    console.print(Text(line, style="bold red" if lost else ""))
    for note in describe_untraced(summary.untraced):
        console.print(Text(escape(note), style="yellow"))
    if summary.not_found:
        console.print(Text("not exported by the traced libraries: "
                           + escape(", ".join(summary.not_found)), style="dim"))
