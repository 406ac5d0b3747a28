"""stats --by collective: NCCL per collective and rank, and the stragglers."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.nccl import CommWaits, NcclStats
from cudaprobe.decode.calls import humanize_bytes
from cudaprobe.output.text import escape, humanize_ns

COLUMNS = ("COLLECTIVE", "RANK", "PID", "CALLS", "FAILED", "BYTES", "HOST AVG", "HOST TOTAL",
           "GPU AVG", "ALGBW GB/s", "BUSBW GB/s")
WAIT_COLUMNS = ("COMMUNICATOR", "RANK", "LAST IN", "OTHERS WAITED", "LONGEST")


def _rank(rank: int | None, nranks: int | None) -> str:
    if rank is None and nranks is None:
        return "?"
    return f"{'?' if rank is None else rank}/{'?' if nranks is None else nranks}"


def _bw(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_nccl_stats(stats: NcclStats, console: Console) -> None:
    table = Table(title="NCCL per collective and rank (sizes and bandwidths as nccl-tests "
                        "reports them)", title_justify="left", show_edge=False,
                  header_style="bold")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col == "COLLECTIVE" else "right")
    for r in stats.rows:
        table.add_row(Text(escape(r.event)), _rank(r.rank, r.nranks), str(r.pid), str(r.calls),
                      str(r.failed) if r.failed else "", humanize_bytes(r.bytes),
                      humanize_ns(r.host_ns // max(r.calls, 1)),
                      humanize_ns(r.host_ns),
                      humanize_ns(r.gpu_ns // r.gpu_calls) if r.gpu_calls else "-",
                      _bw(r.algbw), _bw(r.busbw))
    console.print(table)
    for waits in stats.waits:
        render_waits(waits, console)


def render_waits(waits: CommWaits, console: Console) -> None:
    name = f"{waits.nranks or '?'} ranks #{waits.ordinal}"
    table = Table(title=f"Stragglers: communicator of {name}, {waits.matched} operations "
                        "matched across its ranks (entry-time spread)",
                  title_justify="left", show_edge=False, header_style="bold")
    for col in WAIT_COLUMNS:
        table.add_column(col, justify="left" if col == "COMMUNICATOR" else "right")
    for r in waits.ranks:
        table.add_row(name, str(r.rank), str(r.last), humanize_ns(r.caused_ns),
                      humanize_ns(r.max_ns))
    console.print(table)
    s = waits.straggler
    if s is not None:
        console.print(Text(f"slowest rank: {s.rank} (the others waited {humanize_ns(s.caused_ns)} "
                           f"for it in all; it came last to {s.last} of {waits.matched})",
                           style="bold yellow"))
