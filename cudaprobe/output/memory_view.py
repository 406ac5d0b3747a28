"""What `cudaprobe memory` shows: live bytes per process, leak reports at exit,
the final summary, and the JSON document (schema: docs/memory.md)."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.analysis.memstate import (
    BASE_KINDS,
    KINDS,
    PROCESS_EXIT,
    VMM,
    Allocation,
    ProcessMemory,
)
from cudaprobe.analysis.memtrack import group_by_site
from cudaprobe.decode.calls import humanize_bytes
from cudaprobe.decode.demangle import shorten
from cudaprobe.output.text import cells, cut_middle, escape

SCHEMA = 1
PROCESS_WIDTH = 15  # a comm's length: a longer name (escaped) is cut in the middle
STACK_LINES = 8  # callers shown under a leak's call site in the table (JSON has all)

Ms = Callable[[int], float]  # monotonic ns -> ms since tracing began


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _frame_text(frame: str, limit: int = 90) -> str:
    """`function+0xoff (module)` with a long C++ function shortened; the offset and
    module kept whole; all of it escaped (the names and paths are the process's)."""
    frame = escape(frame)
    name, plus, where = frame.rpartition("+0x")
    return shorten(name, limit) + plus + where if plus else frame


def shown_kinds(processes: list[ProcessMemory]) -> list[str]:
    """The table's kind columns: the usual four, and the others (vmm,
    host-registered) once a process has held some."""
    return [k for k in KINDS if k in BASE_KINDS or any(p.peak_bytes[k] for p in processes)]


def render_processes(processes: list[ProcessMemory], console: Console, title: str) -> None:
    table = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    kinds = shown_kinds(processes)
    # cut here, whole escapes kept, and the column never narrower: rich's own cut
    # would fall inside an escape
    names = {p.pid: cut_middle(escape(p.process), PROCESS_WIDTH) for p in processes}
    for col in ("PID", "PROCESS", *(k.upper() for k in kinds), "LIVE", "PEAK", "ALLOCS",
                "FREES", "FAILED", "STATE"):
        table.add_column(col, justify="left" if col in ("PROCESS", "STATE") else "right",
                         min_width=max(map(cells, names.values()), default=0)
                         if col == "PROCESS" else None, no_wrap=col == "PROCESS")
    for p in sorted(processes, key=lambda p: p.pid):
        c = p.counts
        failed = c["failed_allocations"] + c["failed_frees"]
        table.add_row(str(p.pid), Text(names[p.pid]),
                      *(humanize_bytes(p.live_bytes[k]) for k in kinds),
                      humanize_bytes(p.live_total), humanize_bytes(p.peak_total),
                      str(c["allocations"]), str(c["frees"]),
                      Text(str(failed), style="red" if failed else ""),
                      "exited" if p.exited else "running")
    console.print(table)


PEAK_SITES_SHOWN = 3  # the table's lines on where the peak's memory came from


def render_exit(p: ProcessMemory, console: Console, ms: Ms) -> None:
    """The leak report of a process that exited."""
    leaked = [a for a in p.ended if a.ended_by == PROCESS_EXIT]
    head = (f"pid {p.pid} ({escape(p.process)}) exited: peak {humanize_bytes(p.peak_total)}, "
            f"{_n(p.counts['allocations'], 'allocation')}, {_n(p.counts['frees'], 'free')}")
    console.print(Text(head, style="bold"))
    for site, n in peak_sites(p)[:PEAK_SITES_SHOWN]:
        console.print(Text(f"  at the peak: {humanize_bytes(n)} from "
                           f"{_frame_text(site[0]) if site else '(call site unknown)'}"))
    for by, ts, n, size in p.implicit:
        console.print(Text(f"  {by} at {ms(ts):.3f} ms freed {_n(n, 'allocation')} "
                           f"({humanize_bytes(size)}) without a free call"))
    if not p.ended:
        console.print("  no leaks: nothing was left allocated")
        return
    total = sum(a.size for a in leaked)
    console.print(Text(f"  {_n(len(leaked), 'allocation')} never freed, "
                       f"{humanize_bytes(total)}; {len(p.ended) - len(leaked)} freed only "
                       "implicitly", style="red"))
    table = Table(show_edge=False, header_style="bold", box=None, padding=(0, 1))
    for col in ("BYTES", "COUNT", "KIND", "FUNCTION", "ENDED BY", "CALL SITE"):
        table.add_column(col, justify="right" if col in ("BYTES", "COUNT") else "left",
                         no_wrap=col != "CALL SITE")
    for g in group_by_site(p.ended):
        function = escape(f"{g.event} ({g.outstanding})" if g.outstanding else g.event)
        table.add_row(humanize_bytes(g.bytes), str(len(g.allocations)), g.kind, Text(function),
                      g.ended_by, Text(_frame_text(g.site[0]) if g.site else "(unknown)"))
        for frame in g.site[1:STACK_LINES + 1]:
            table.add_row("", "", "", "", "", Text("  " + _frame_text(frame), style="dim"))
    console.print(table)


def render_summary(processes: list[ProcessMemory], lost: dict[str, int], in_flight: int,
                   duration_s: float, console: Console) -> None:
    render_processes(processes, console, "cudaprobe memory")
    c = {key: sum(p.counts[key] for p in processes) for key in (
        "allocations", "frees", "failed_allocations", "failed_frees", "unknown_frees",
        "nested_driver_calls")}
    lost_total = sum(lost.values())
    line = (f"{c['allocations']} allocations, {c['frees']} frees, "
            f"{c['failed_allocations']} failed allocations, {c['failed_frees']} failed frees, "
            f"{c['unknown_frees']} frees of memory allocated before tracing; "
            f"{c['nested_driver_calls']} driver calls counted with their runtime call; "
            f"{duration_s:.2f}s, {in_flight} calls in flight, {lost_total} lost")
    if lost_total:
        line += (" (" + ", ".join(f"{k}={v}" for k, v in lost.items() if v) +
                 ": the accounting misses those calls)")
    console.print(Text(line, style="bold red" if lost_total else ""))


def _allocation(a: Allocation, ms: Ms) -> dict[str, Any]:
    out = {"ptr": f"{a.ptr:#x}", "size": a.size, "at_ms": ms(a.ts_ns), "tid": a.tid}
    if a.kind == VMM:  # ptr is the handle; whether released, where it is still mapped
        out.update(released=a.released,
                   mappings=[[f"{va:#x}", n] for va, n in sorted(a.mappings.items())])
    return out


def process_dict(p: ProcessMemory, ms: Ms) -> dict[str, Any]:
    counts = {k: p.counts[k] for k in (
        "allocations", "frees", "failed_allocations", "failed_frees", "unknown_frees",
        "nested_driver_calls", "bytes_allocated", "bytes_freed", "bytes_failed", "replaced",
        "failed_maps", "unknown_maps")}

    def groups(allocations: list[Allocation]) -> list[dict[str, Any]]:
        return [{"site": list(g.site), "event": g.event, "kind": g.kind,
                 "ended_by": g.ended_by or None, "outstanding": g.outstanding or None,
                 "count": len(g.allocations), "bytes": g.bytes,
                 "allocations": [_allocation(a, ms) for a in g.allocations]}
                for g in group_by_site(allocations)]

    return {
        "pid": p.pid,
        "process": p.process,
        "exited": p.exited,
        **counts,
        "live_bytes": {**p.live_bytes, "total": p.live_total},
        "peak_bytes": {**p.peak_bytes, "total": p.peak_total, "at_ms": ms(p.peak_ns)},
        "timeline": [[ms(ts), n] for ts, n in p.timeline],
        "implicit_frees": [{"by": by, "at_ms": ms(ts), "allocations": n, "bytes": size}
                           for by, ts, n, size in p.implicit],
        "leaks": groups(p.ended),
        "peak_by_site": [{"site": list(site), "bytes": n} for site, n in peak_sites(p)],
        "live": groups(list(p.live.values())),
    }


def peak_sites(p: ProcessMemory) -> list[tuple[tuple[str, ...], int]]:
    """The call sites of the memory live at the peak, most bytes first."""
    return sorted(p.peak_by_site.items(), key=lambda kv: (-kv[1], kv[0]))


def to_dict(processes: list[ProcessMemory], lost: dict[str, int], in_flight: int,
            duration_s: float, libraries: list[str], ms: Ms) -> dict[str, Any]:
    return {
        "cudaprobe": "memory",
        "schema": SCHEMA,
        "duration_s": round(duration_s, 3),
        "processes": [process_dict(p, ms) for p in sorted(processes, key=lambda p: p.pid)],
        "in_flight": in_flight,
        "lost": lost,
        "lost_total": sum(lost.values()),
        "libraries": libraries,
    }
