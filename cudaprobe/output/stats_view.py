"""The stats table, built with rich and printed to an injected console."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.gpustats import GpuStats
from cudaprobe.analysis.stats import PERCENTILE_NOTE, PERCENTILES, StatsReport
from cudaprobe.decode.calls import humanize_bytes
from cudaprobe.decode.demangle import shorten
from cudaprobe.output.nccl_view import render_nccl_stats
from cudaprobe.output.summary_view import describe_untraced, short_errors
from cudaprobe.output.text import cells, cut_end, cut_middle, escape, humanize_ns

COLUMNS = ("EVENT", "CALLS", "TOTAL", "AVG", "MIN", "MAX", *(f"P{q}" for q in PERCENTILES),
           "ERRORS")


# the columns a narrow terminal goes without, the first first (-f json has them all)
DROP_ORDER = ("P95", "MIN", "MAX", "AVG", "P99", "P50")
NAME_WANT = 48  # a name column whole up to this, before any column but the first
NAME_MIN = 20  # ... its cells where the terminal has no room for more
ERRORS_MIN = 12


def fitted_table(title: str, columns: tuple[str, ...], rows: list[list[str]], width: int,
                 left: tuple[str, ...]) -> Table:
    """A rich Table of `rows` (plain text, the first column a name) that fits
    in `width` cells without wrapping a row: the columns of DROP_ORDER left
    out (said under the table) while the name column cannot be as wide as
    its longest (up to NAME_WANT), an ERRORS column last, cut with `…` to
    what is left."""
    natural = [max([cells(col), *(cells(r[i]) for r in rows)]) for i, col in enumerate(columns)]
    errors = columns.index("ERRORS") if "ERRORS" in columns else None

    def used(kept: list[int], name_width: int) -> int:  # each column padded, a rule between
        want = {i: natural[i] for i in kept}
        want[0] = name_width
        if errors in want:
            want[errors] = min(natural[errors], ERRORS_MIN)
        return sum(w + 3 for w in want.values()) - 1

    kept = list(range(len(columns)))
    for drop in DROP_ORDER:
        if used(kept, min(natural[0], NAME_WANT)) <= width:
            break
        if drop in columns:
            kept.remove(columns.index(drop))
    name_width = max(min(natural[0], NAME_MIN),
                     min(natural[0], width - used(kept, 0)))
    widths = {i: natural[i] for i in kept}
    widths[0] = name_width
    if errors in widths:
        room = width - used([i for i in kept if i != errors], name_width) - 3
        widths[errors] = min(natural[errors], max(ERRORS_MIN, room))
    left_out = [columns[i] for i in range(len(columns)) if i not in kept]
    table = Table(title=title, title_justify="left", show_edge=False, header_style="bold",
                  caption=(f"{', '.join(left_out)} left out at this width (-f json has them)"
                           if left_out else None), caption_justify="left")
    for i in kept:
        table.add_column(columns[i], justify="left" if columns[i] in left else "right",
                         no_wrap=True, min_width=widths[i], max_width=widths[i])
    cut = [cut_middle if i == 0 else cut_end for i in range(len(columns))]
    if errors in widths and widths[errors] < natural[errors]:  # the names less their prefixes
        rows = [[*r[:errors], short_errors(r[errors]), *r[errors + 1:]] for r in rows]
    for r in rows:
        table.add_row(*(Text(cut[i](r[i], widths[i]),
                             style="red" if i == errors and r[i] else "") for i in kept))
    return table


def render_stats(report: StatsReport, console: Console, sort: str = "total",
                 title: str = "cudaprobe stats") -> None:
    rows = []
    for s in report.sorted(sort):
        errors = ", ".join(f"{name} x{n}" for name, n in
                           sorted(s.errors.items(), key=lambda kv: -kv[1]))
        if s.errors_unkeyed:
            errors += f"{', ' if errors else ''}unknown code x{s.errors_unkeyed}"
        # kernel names (--by kernel) run to kilobytes: shortened here, whole in --json;
        # Python lines (--by line) are paths, kept whole; both the program's: escaped
        name = escape(s.event) if report.per == "line" else shorten(escape(s.event))
        rows.append([name, str(s.count), humanize_ns(s.total_ns), humanize_ns(s.avg_ns),
                     humanize_ns(s.min_ns), humanize_ns(s.max_ns),
                     *(humanize_ns(s.p(q)) for q in PERCENTILES), errors])
    table = fitted_table(f"{title}: {PERCENTILE_NOTE}", COLUMNS, rows, console.width,
                         ("EVENT", "ERRORS"))
    console.print(table)
    if report.gpu is not None:
        render_gpu_stats(report.gpu, console)
    if report.nccl is not None:
        render_nccl_stats(report.nccl, console)
    lost = sum(report.lost.values())
    line = (f"{report.total_calls} calls in {report.duration_s:.2f}s, "
            f"{report.in_flight} still in flight, {lost} lost")
    if lost:
        line += " (" + ", ".join(f"{k}={v}" for k, v in report.lost.items() if v) + ")"
    console.print(Text(line, style="bold red" if lost else ""))
    for note in describe_untraced(report.untraced):
        console.print(Text(escape(note), style="yellow"))
    if report.not_found:
        console.print(Text("not exported by the traced libraries: "
                           + escape(", ".join(report.not_found)), style="dim"))


GPU_KERNEL_COLUMNS = ("KERNEL", "CALLS", "GPU TOTAL", "AVG", "MIN", "MAX", "P50", "P99")
GPU_COPY_COLUMNS = ("COPY", "CALLS", "GPU TOTAL", "AVG", "BYTES", "BANDWIDTH")


def render_gpu_stats(gpu: GpuStats, console: Console) -> None:
    """stats --gpu-time: per kernel name (as nsys' cuda_gpu_kern_sum), per copy kind."""
    for columns, rows, kernel in ((GPU_KERNEL_COLUMNS, gpu.kernels, True),
                                  (GPU_COPY_COLUMNS, gpu.copies, False)):
        if not rows:
            continue
        title = "GPU time per kernel" if kernel else "GPU time per copy kind"
        if gpu.per == "line":  # stats --by line: a row per Python line
            title = "GPU time of the kernels" if kernel else "GPU time of the copies and memsets"
            title, columns = title + " each Python line queued", ("LINE", *columns[1:])
        backward = any(r.backward_ns for r in rows)  # --by line: PyTorch's backward on its line
        if backward:  # a line's GPU TOTAL split: its ops' forward work, and their backward
            columns = (*columns[:3], "FORWARD", "BACKWARD", *columns[3:])
        texts = []
        for r in rows:
            d = r.to_dict(kernel)
            name = escape(r.name) if gpu.per == "line" else shorten(escape(r.name))
            row = [name, str(r.calls), humanize_ns(d["total_ns"]), humanize_ns(d["avg_ns"])]
            if backward:
                row[3:3] = [humanize_ns(d["total_ns"] - r.backward_ns),
                            humanize_ns(r.backward_ns) if r.backward_ns else "-"]
            if kernel:
                row += [humanize_ns(d[k]) for k in ("min_ns", "max_ns", "p50_ns", "p99_ns")]
            else:
                bandwidth = d["bandwidth_gbps"]
                row += [humanize_bytes(r.bytes),
                        "-" if bandwidth is None else f"{bandwidth:.2f} GB/s"]
            texts.append(row)
        table = fitted_table(title, columns, texts, console.width, ("KERNEL", "COPY", "LINE"))
        console.print(table)
        if backward:
            console.print(Text("FORWARD and BACKWARD: a line's GPU time split into that of what "
                               "it queued and that of PyTorch's backward pass of its ops "
                               "(docs/pystacks.md)", style="dim"))
    if gpu.dropped:
        console.print(Text(f"CUPTI dropped {gpu.dropped} GPU activity records: "
                           "the GPU numbers miss them", style="bold red"))
