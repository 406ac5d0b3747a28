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

from cudaprobe.catalogue.enums import error_name
from cudaprobe.decode.calls import Call
from cudaprobe.probe.event import CallTally
from cudaprobe.probe.plan import Probe

NOT_LOST = ("wakeups",)  # counters that sit with the losses but are not any
UNKNOWN_CODE = "unknown code"  # a failed call whose code the kernel could not keep


def count_lost(lost: dict[str, int]) -> int:
    return sum(v for k, v in lost.items() if k not in NOT_LOST)


@dataclass(frozen=True)
class Untraced:
    """A span in which a traced process's calls could not be seen: before
    cudaprobe attached to it (--pid), before a CUDA library it mapped was
    found and probed (the maps rescan), or a child's whole life (GONE_UNPROBED,
    with its `parent`). `seconds` is at most that long (0: not known)."""
    pid: int
    process: str
    seconds: float
    before: str  # "the attach", the library's path, or GONE_UNPROBED
    parent: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"pid": self.pid, "process": self.process, "up_to_s": round(self.seconds, 6),
               "before": self.before}
        if self.parent is not None:
            out["parent"] = self.parent
        return out


ATTACH = "the attach"  # Untraced.before of a process's calls before cudaprobe attached
# Untraced.before of a child process that shared its parent's CUDA mappings (a
# fork without exec) and was gone before its own probes could be put in: its
# whole life (`seconds` 0: not known)
GONE_UNPROBED = "its probes"


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
    # --otlp: spans (copies of rows) that did not reach the collector, by cause
    undelivered: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    attach_s: float = 0.0
    startup_s: float = 0.0
    bpf_program: str = ""  # "compiled" by bcc, or "cached": loaded without compiling
    exit_status: int | None = None
    # calls whose thread exited before they returned (sweep.py): no result to report
    exited_mid_call: int = 0
    untraced: list[Untraced] = field(default_factory=list)  # spans whose calls were not seen
    # processes given probes of their own (-- COMMAND and its descendants, --pid,
    # --comm); None where probes are per library
    processes_traced: int | None = None

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
        """What add() counts, for calls tallied elsewhere (decode.records.RecordDecoder.count)."""
        st = self.by_event.get(event)
        if st is None:
            st = self.by_event[event] = EventStats()
        st.calls += calls
        st.total_ns += total_ns
        st.errors.update(errors)

    def take_kernel_counts(self, probes: list[Probe], tally: dict[int, CallTally]) -> None:
        """The calls counted in the kernel (MapReader.read_tally), per function:
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
        """The calls written as rows: those decoded, less those the output dropped
        (--max-size, a failed write: `output_*` in `lost`), so that rows and
        lost_total add up to calls."""
        dropped = sum(v for k, v in self.lost.items() if k.startswith("output_"))
        return sum(s.calls for s in self.by_event.values()) - dropped

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
            **({"undelivered": dict(self.undelivered)} if self.undelivered else {}),
            "duration_s": round(self.duration_s, 3),
            "attach_s": round(self.attach_s, 3),
            "startup_s": round(self.startup_s, 3),
            "bpf_program": self.bpf_program,
            "libraries": self.libraries,
            "not_found": self.not_found,
            "untraced": [u.to_dict() for u in self.untraced],
            **({"processes_traced": self.processes_traced}
               if self.processes_traced is not None else {}),
        }
