"""stats --by collective: NCCL per operation, size and rank, in nccl-tests'
columns; then who waited for whom, per communicator."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.nccl import GPU, NcclStats
from cudaprobe.analysis.nccl_waits import CommWaits
from cudaprobe.output.text import escape, humanize_ns

COLUMNS = ("OPERATION", "RANK", "PID", "SIZE (B)", "COUNT", "TYPE", "CALLS", "FAILED",
           "TIME (us)", "TIMED BY", "ALGBW GB/s", "BUSBW GB/s")
WAIT_COLUMNS = ("COMMUNICATOR", "RANK", "PID", "LAST TO START", "WAITED", "OTHERS WAITED FOR IT",
                "LONGEST")
TIMED_BY = "TIMED BY: gpu = from the last rank's kernel start to this rank's kernel end; " \
           "kernel = this rank's whole kernel (not every rank's seen: waits in); " \
           "host = the call on the CPU (NCCL queues its work: no bandwidth)"
WAITS_NEED_GPU = "Waits: not measured: they need --gpu-time (NCCL returns once its work is " \
                 "queued, so when a rank's host made a call says nothing of when its GPU " \
                 "began it)"


def _rank(rank: int | None, nranks: int | None) -> str:
    if rank is None and nranks is None:
        return "?"
    return f"{'?' if rank is None else rank}/{'?' if nranks is None else nranks}"


def _number(value: float | int | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def render_nccl_stats(stats: NcclStats, console: Console) -> None:
    table = Table(title="NCCL per operation, size and rank (size, count and bandwidths as "
                        "nccl-tests reports them)", title_justify="left", show_edge=False,
                  header_style="bold")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("OPERATION", "TYPE", "TIMED BY")
                         else "right")
    for r in stats.rows:
        t = r.time_ns
        table.add_row(Text(escape(r.name)), _rank(r.rank, r.nranks), str(r.pid),
                      _number(r.size, "d"), _number(r.count, "d"), Text(escape(r.type)),
                      str(r.calls), str(r.failed) if r.failed else "",
                      _number(None if t is None else t / 1e3, ".1f"), r.timed_by,
                      _number(r.algbw, ".2f"), _number(r.busbw, ".2f"))
    console.print(table)
    if any(r.timed_by != GPU for r in stats.rows):
        console.print(Text(TIMED_BY, style="dim"))
    if stats.waits and not stats.gpu_time:
        console.print(Text(WAITS_NEED_GPU, style="yellow"))
        return
    for waits in stats.waits:
        render_waits(waits, console)


def render_waits(waits: CommWaits, console: Console) -> None:
    name = f"{waits.nranks or '?'} ranks #{waits.ordinal}"
    if not waits.measured:  # no figure, rather than zeros that say nobody waited
        console.print(Text(f"Waits: communicator of {name}: none of its {waits.matched} "
                           "operations seen on every rank had GPU time on every rank",
                           style="yellow"))
        return
    traced = len(waits.ranks)
    of = f", {traced} of its {waits.nranks} ranks traced: waits among them" \
        if waits.nranks and traced < waits.nranks else ""
    table = Table(title=f"Waits on the GPU: communicator of {name}, {waits.measured} of "
                        f"{waits.matched} operations timed on every rank{of}",
                  title_justify="left", show_edge=False, header_style="bold")
    for col in WAIT_COLUMNS:
        table.add_column(col, justify="left" if col == "COMMUNICATOR" else "right")
    for r in waits.ranks:
        table.add_row(name, str(r.rank), str(r.pid), str(r.last), humanize_ns(r.waited_ns),
                      humanize_ns(r.caused_ns), humanize_ns(r.max_ns))
    console.print(table)
    s = waits.straggler
    if s is not None:
        console.print(Text(f"straggler: rank {s.rank} (its kernel started last in {s.last} of "
                           f"{waits.measured}; the others waited for it "
                           f"{humanize_ns(s.caused_ns)}{' each at most' if traced > 2 else ''}, "
                           "in all)", style="bold yellow"))
