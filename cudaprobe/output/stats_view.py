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
from cudaprobe.output.summary_view import describe_untraced
from cudaprobe.output.text import escape, humanize_ns

COLUMNS = ("EVENT", "CALLS", "TOTAL", "AVG", "MIN", "MAX", *(f"P{q}" for q in PERCENTILES),
           "ERRORS")


def render_stats(report: StatsReport, console: Console, sort: str = "total",
                 title: str = "cudaprobe stats") -> None:
    table = Table(title=f"{title}: {PERCENTILE_NOTE}", title_justify="left", show_edge=False,
                  header_style="bold")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("EVENT", "ERRORS") else "right")
    for s in report.sorted(sort):
        errors = ", ".join(f"{name} x{n}" for name, n in
                           sorted(s.errors.items(), key=lambda kv: -kv[1]))
        if s.errors_unkeyed:
            errors += f"{', ' if errors else ''}unknown code x{s.errors_unkeyed}"
        # kernel names (--by kernel) run to kilobytes: shortened here, whole in --json;
        # Python lines (--by line) are paths, kept whole; both the program's: escaped
        name = escape(s.event) if report.per == "line" else shorten(escape(s.event))
        table.add_row(Text(name), str(s.count), humanize_ns(s.total_ns),
                      humanize_ns(s.avg_ns), humanize_ns(s.min_ns), humanize_ns(s.max_ns),
                      *(humanize_ns(s.p(q)) for q in PERCENTILES),
                      Text(errors, style="red" if errors else ""))
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
        table = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
        for col in columns:
            table.add_column(col, justify="left" if col in ("KERNEL", "COPY", "LINE") else "right")
        for r in rows:
            d = r.to_dict(kernel)
            name = escape(r.name) if gpu.per == "line" else shorten(escape(r.name))
            cells = [Text(name), str(r.calls), humanize_ns(d["total_ns"]), humanize_ns(d["avg_ns"])]
            if kernel:
                cells += [humanize_ns(d[k]) for k in ("min_ns", "max_ns", "p50_ns", "p99_ns")]
            else:
                bandwidth = d["bandwidth_gbps"]
                cells += [humanize_bytes(r.bytes),
                          "-" if bandwidth is None else f"{bandwidth:.2f} GB/s"]
            table.add_row(*cells)
        console.print(table)
    if gpu.dropped:
        console.print(Text(f"CUPTI dropped {gpu.dropped} GPU activity records: "
                           "the GPU numbers miss them", style="bold red"))
