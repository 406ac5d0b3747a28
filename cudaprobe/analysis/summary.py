"""End-of-trace summary: calls per function, errors, lost and in-flight calls."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudaprobe.decode.calls import Call, humanize_ns

NOT_LOST = ("wakeups",)  # counters that sit with the losses but are not any


def count_lost(lost: dict[str, int]) -> int:
    return sum(v for k, v in lost.items() if k not in NOT_LOST)


def describe_lost(lost: dict[str, int]) -> str:
    """`ringbuf_full=12, decode_errors=1`: the causes that happened."""
    return ", ".join(f"{k}={v}" for k, v in lost.items() if v and k not in NOT_LOST)


@dataclass
class EventStats:
    calls: int = 0
    total_ns: int = 0
    errors: Counter = field(default_factory=Counter)


@dataclass
class Summary:
    libraries: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    by_event: dict[str, EventStats] = field(default_factory=dict)
    in_flight: list[Call] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    attach_s: float = 0.0
    startup_s: float = 0.0
    exit_status: int | None = None
    # calls whose thread exited before they returned (sweep.py): no result to report
    exited_mid_call: int = 0

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

    @property
    def total_calls(self) -> int:
        return sum(s.calls for s in self.by_event.values())

    @property
    def total_lost(self) -> int:
        return count_lost(self.lost)

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.total_calls,
            "by_event": {
                name: {"calls": s.calls, "total_ns": s.total_ns, "errors": dict(s.errors)}
                for name, s in sorted(self.by_event.items())
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
        }

    def render(self, console: Console) -> None:
        table = Table(title="cudaprobe summary", title_justify="left", show_edge=False)
        for col, justify in (("EVENT", "left"), ("CALLS", "right"), ("TOTAL", "right"),
                             ("AVG", "right"), ("ERRORS", "left")):
            table.add_column(col, justify=justify)
        rows = sorted(self.by_event.items(), key=lambda kv: -kv[1].total_ns)
        for name, s in rows:
            errors = ", ".join(f"{n} x{k}" for n, k in s.errors.most_common())
            avg = humanize_ns(s.total_ns // s.calls) if s.calls else "-"
            table.add_row(Text(name), str(s.calls), humanize_ns(s.total_ns), avg, Text(errors))
        console.print(table)
        lost = self.total_lost
        line = (f"{self.total_calls} calls in {self.duration_s:.2f}s, "
                f"{len(self.in_flight)} still in flight, {lost} lost")
        if self.exited_mid_call:
            line += f", {self.exited_mid_call} ended with their thread"
        if lost:
            line += f" ({describe_lost(self.lost)})"
        console.print(Text(line, style="bold red" if lost else ""))
        if self.not_found:
            console.print(Text("not exported by the traced libraries: " + ", ".join(self.not_found),
                               style="dim"))
