"""End-of-trace summary: calls per function, errors, lost and in-flight calls.

Two counts of the calls: the rows, those whose records reached cudaprobe
(add, add_counts, as the record loop meets them), and, in trace mode, the
kernel's count of every call that returned (take_kernel_counts, at the end),
which a full ring buffer does not thin out. Where the kernel's are taken,
the per-function calls, errors and latency are the kernel's, and the rows
and what was lost are reported beside them, never folded in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.catalogue.enums import error_name
from cudaprobe.decode.calls import Call, cut_middle, humanize_ns
from cudaprobe.probe.event import CallTally
from cudaprobe.probe.plan import Probe

NOT_LOST = ("wakeups",)  # counters that sit with the losses but are not any
UNKNOWN_CODE = "unknown code"  # a failed call whose code the kernel could not keep


def count_lost(lost: dict[str, int]) -> int:
    return sum(v for k, v in lost.items() if k not in NOT_LOST)


def describe_lost(lost: dict[str, int]) -> str:
    """`ringbuf_full=12, decode_errors=1`: the causes that happened."""
    return ", ".join(f"{k}={v}" for k, v in lost.items() if v and k not in NOT_LOST)


@dataclass(frozen=True)
class Untraced:
    """A span in which a traced process's calls could not be seen: before
    cudaprobe attached to it (--pid), or before a CUDA library it mapped was
    found and probed (the maps rescan). `seconds` is at most that long."""
    pid: int
    process: str
    seconds: float
    before: str  # "the attach", or the library's path

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "process": self.process, "up_to_s": round(self.seconds, 3),
                "before": self.before}

    def describe(self) -> str:
        if self.before == ATTACH:
            return (f"pid {self.pid} ({self.process}) ran {self.seconds:.2f}s before the "
                    "attach: its calls until then, and those under way then, are not included")
        return (f"pid {self.pid} ({self.process}) mapped {self.before} up to "
                f"{self.seconds:.2f}s before it was probed: its calls there until then are "
                "not included")


ATTACH = "the attach"
SHOWN_UNTRACED = 5  # said one by one; more are counted


def describe_untraced(spans: list[Untraced]) -> list[str]:
    """The summary's lines about calls not seen: one per span, then a count."""
    lines = [f"not traced: {u.describe()}" for u in spans[:SHOWN_UNTRACED]]
    if len(spans) > SHOWN_UNTRACED:
        lines.append(f"not traced: {len(spans) - SHOWN_UNTRACED} more such spans (see --json "
                     "or the JSONL trailer's `untraced`)")
    return lines


@dataclass
class EventStats:
    calls: int = 0
    total_ns: int = 0
    errors: Counter = field(default_factory=Counter)


@dataclass
class Summary:
    libraries: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    by_event: dict[str, EventStats] = field(default_factory=dict)  # the rows, per function
    kernel: dict[str, EventStats] | None = None  # every call, per function (trace mode)
    in_flight: list[Call] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    attach_s: float = 0.0
    startup_s: float = 0.0
    exit_status: int | None = None
    # calls whose thread exited before they returned (sweep.py): no result to report
    exited_mid_call: int = 0
    untraced: list[Untraced] = field(default_factory=list)  # spans whose calls were not seen

    def add(self, calls: list[Call]) -> None:
        for c in calls:
            st = self.by_event.get(c.event)
            if st is None:
                st = self.by_event[c.event] = EventStats()
            st.calls += 1
            st.total_ns += c.duration_ns or 0
            if c.ret:
                st.errors[c.ret_name] += 1

    def add_counts(self, event: str, calls: int, total_ns: int, errors: dict[str, int]) -> None:
        """What add() counts, for calls tallied elsewhere (decoders.RecordDecoder.jsonl)."""
        st = self.by_event.get(event)
        if st is None:
            st = self.by_event[event] = EventStats()
        st.calls += calls
        st.total_ns += total_ns
        st.errors.update(errors)

    def take_kernel_counts(self, probes: list[Probe], tally: dict[int, CallTally]) -> None:
        """The calls counted in the kernel (Tracer.read_tally), per function:
        from now on the summary's calls, errors and latency."""
        counted: dict[str, EventStats] = {}
        for p in probes:
            t = tally.get(p.func_id)
            if t is None or not t.calls:
                continue
            st = counted.setdefault(p.symbol, EventStats())
            st.calls += t.calls
            st.total_ns += t.total_ns
            for ret, n in t.errors.items():
                st.errors[error_name(p.function.api, ret)] += n
            if t.errors_unkeyed:
                st.errors[UNKNOWN_CODE] += t.errors_unkeyed
        self.kernel = counted

    @property
    def counts(self) -> dict[str, EventStats]:
        """Per function: the kernel's counts where taken, else the rows'."""
        return self.by_event if self.kernel is None else self.kernel

    @property
    def total_calls(self) -> int:
        return sum(s.calls for s in self.counts.values())

    @property
    def total_rows(self) -> int:
        return sum(s.calls for s in self.by_event.values())

    @property
    def total_lost(self) -> int:
        return count_lost(self.lost)

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.total_calls,
            "rows": self.total_rows,
            "by_event": {
                name: {"calls": s.calls, "total_ns": s.total_ns, "errors": dict(s.errors)}
                for name, s in sorted(self.counts.items())
            },
            "in_flight": len(self.in_flight),
            "exited_mid_call": self.exited_mid_call,
            "lost": {k: v for k, v in self.lost.items() if k != "wakeups"},
            "lost_total": self.total_lost,
            "duration_s": round(self.duration_s, 3),
            "attach_s": round(self.attach_s, 3),
            "startup_s": round(self.startup_s, 3),
            "libraries": self.libraries,
            "not_found": self.not_found,
            "untraced": [u.to_dict() for u in self.untraced],
        }

    def render(self, console: Console) -> None:
        """The table, a line per function at any width from 80: an error per line
        of its cell, never split; names cut in the middle where the line is short
        (the suffix stays: `cudaLaunchCoop…Kernel_ptsz`)."""
        by_total = sorted(self.counts.items(), key=lambda kv: -kv[1].total_ns)
        rows = []
        for name, s in by_total:
            errors = "\n".join(f"{n} x{k}" for n, k in s.errors.most_common())
            avg = humanize_ns(s.total_ns // s.calls) if s.calls else "-"
            rows.append([name, str(s.calls), humanize_ns(s.total_ns), avg, errors])
        titles = ("EVENT", "CALLS", "TOTAL", "AVG", "ERRORS")
        widths = [max([len(titles[i])] + [len(line) for r in rows for line in r[i].split("\n")])
                  for i in range(len(titles))]
        # each column's padding and rule: 3 characters, less the edge
        event_width = max(len(titles[0]), console.width - sum(widths[1:]) - 3 * len(titles))
        table = Table(title="cudaprobe summary", title_justify="left", show_edge=False)
        for col, justify in zip(titles, ("left", "right", "right", "right", "left")):
            table.add_column(col, justify=justify, no_wrap=True)
        for name, *cells in rows:
            table.add_row(Text(cut_middle(name, event_width)), *cells[:-1], Text(cells[-1]))
        console.print(table)
        lost = self.total_lost
        line = f"{self.total_calls} calls in {self.duration_s:.2f}s, "
        if self.total_rows != self.total_calls:  # lost, or --errors-only
            line += f"{self.total_rows} as rows, "
        line += f"{len(self.in_flight)} still in flight, {lost} lost"
        if self.exited_mid_call:
            line += f", {self.exited_mid_call} ended with their thread"
        if lost:
            line += f" ({describe_lost(self.lost)})"
        console.print(Text(line, style="bold red" if lost else ""))
        for note in describe_untraced(self.untraced):
            console.print(Text(note, style="yellow"))
        if self.not_found:
            console.print(Text("not exported by the traced libraries: " + ", ".join(self.not_found),
                               style="dim"))
