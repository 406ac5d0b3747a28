"""Check a Chrome Trace Event JSON file's structure and count what is on each track.

A checking tool, used by the tests and by scripts/gpu/check-chrome.sh on what
`--format chrome` wrote:  python3 tests/chrome_check.py TRACE.json[.gz] ...
Prints counts per track (pid/tid: slices, in-flight slices, flows) and exits
1 if anything is wrong: an X event without ts/dur/pid/tid, a flow start
without its end (or the reverse), a flow that binds to no slice, slices of a
thread that overlap without nesting, a pid or tid no metadata event names,
or a name given twice. Loads the whole file: a checker, not a viewer.
"""

from __future__ import annotations

import bisect
import gzip
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cudaprobe.output.chrome import GPU_PID_BASE

MAX_PROBLEMS = 50  # said one by one; the rest are counted

Track = tuple[int, int]


@dataclass
class Slice:
    name: str
    track: Track
    start_ns: int
    end_ns: float  # inf: began ("B") and never ended


@dataclass
class TrackStats:
    slices: int = 0
    in_flight: int = 0
    flows_out: int = 0
    flows_in: int = 0


@dataclass
class ChromeReport:
    events: int = 0
    terminated: bool = True  # the closing `]` was there
    tracks: dict[Track, TrackStats] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[Track, str] = field(default_factory=dict)
    by_name: Counter = field(default_factory=Counter)  # slices per event name
    flows: list[tuple[str, Slice, Slice]] = field(default_factory=list)  # name, from, to
    summary: dict[str, Any] | None = None  # args of the "cudaprobe summary" instant
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def lines(self) -> list[str]:
        """Counts per track, then the busiest names and flow pairs, then problems."""
        slices = sum(t.slices for t in self.tracks.values())
        # the calls' slices: the GPU tracks (--gpu-time) hold the work they queued
        call_slices = sum(t.slices for (pid, _), t in self.tracks.items() if pid < GPU_PID_BASE)
        in_flight = sum(t.in_flight for t in self.tracks.values())
        out = [f"{self.events} events, {'terminated' if self.terminated else 'no closing ]'}; "
               f"{slices} slices ({in_flight} in flight), {len(self.flows)} flows, "
               f"{len(self.process_names)} processes, {len(self.tracks)} threads"]
        if self.summary is not None:
            s = self.summary
            # a slice per call, completed or in flight, less those --max-size left out
            dropped = (s.get("lost") or {}).get("output_max_size", 0)
            same = call_slices == (s.get("calls") or 0) + (s.get("in_flight") or 0) - dropped
            out.append(f"summary: calls {s.get('calls')}, in_flight {s.get('in_flight')}, "
                       f"lost_total {s.get('lost_total')}; the slices "
                       f"{'match' if same else 'DO NOT match'} it")
        for (pid, tid), t in sorted(self.tracks.items()):
            out.append(f"track pid {pid} ({self.process_names.get(pid)}) tid {tid} "
                       f"({self.thread_names.get((pid, tid))}): {t.slices} slices, "
                       f"{t.in_flight} in flight, {t.flows_out} flows out, {t.flows_in} in")
        out += [f"  {n:>7} x {name}" for name, n in self.by_name.most_common(12)]
        pairs = Counter(f"{a.name} -> {b.name}" for _, a, b in self.flows)
        out += [f"  {n:>7} x flow {pair}" for pair, n in pairs.most_common(12)]
        out.append(f"problems: {self.problem_count}")
        out += [f"  {p}" for p in self.problems]
        return out


def load_events(path: str) -> tuple[list[dict[str, Any]], bool]:
    """The events of a trace file (gzip too), and whether its array was closed;
    the object format's traceEvents are accepted."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    try:
        data, terminated = json.loads(text), True
    except json.JSONDecodeError:
        # the array format may lack its `]` (a writer that was killed)
        data, terminated = json.loads(text.rstrip().rstrip(",") + "]"), False
    if isinstance(data, dict):
        data = data.get("traceEvents", [])
    return data, terminated


def _ns(us: Any) -> int:
    return round(us * 1000)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_events(events: list[Any], terminated: bool = True) -> ChromeReport:
    report = ChromeReport(events=len(events), terminated=terminated)
    slices: dict[Track, list[Slice]] = {}
    flow_ends: dict[str, dict[tuple, dict]] = {"s": {}, "f": {}}  # ph -> (cat, name, id) -> event
    used: set[Track] = set()
    for i, e in enumerate(events):
        if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
            report.problem(f"event {i}: not an object with a ph")
            continue
        ph = e["ph"]
        needs_tid = ph in ("X", "B", "s", "f") or e.get("name") == "thread_name"
        if ((ph == "M" or needs_tid) and not _is_int(e.get("pid"))
                or needs_tid and not _is_int(e.get("tid"))):
            report.problem(f"event {i} ({ph}): pid and tid must be integers")
            continue
        if ph != "M" and not _is_number(e.get("ts")):
            report.problem(f"event {i} ({ph}): no numeric ts")
            continue
        track = (e.get("pid"), e.get("tid"))
        if ph in ("X", "B"):
            if not isinstance(e.get("name"), str):
                report.problem(f"event {i} ({ph}): no name")
                continue
            if ph == "X" and not (_is_number(e.get("dur")) and e["dur"] >= 0):
                report.problem(f"event {i} (X {e['name']}): no dur >= 0")
                continue
            end = _ns(e["ts"] + e["dur"]) if ph == "X" else float("inf")
            slices.setdefault(track, []).append(Slice(e["name"], track, _ns(e["ts"]), end))
            stats = report.tracks.setdefault(track, TrackStats())
            stats.slices += 1
            stats.in_flight += ph == "B"
            report.by_name[e["name"]] += 1
            used.add(track)
        elif ph in ("s", "f"):
            key = (e.get("cat"), e.get("name"), e.get("id"))
            if key[2] is None:
                report.problem(f"event {i} ({ph}): flow without id")
                continue
            if key in flow_ends[ph]:
                report.problem(f"flow {key}: two '{ph}' events")
            flow_ends[ph][key] = e
            used.add(track)
        elif ph == "M":
            _metadata(report, e, i)
        elif ph in ("i", "I") and e.get("name") == "cudaprobe summary":
            report.summary = e.get("args")
    for track in sorted(used):
        if track[0] not in report.process_names:
            report.problem(f"pid {track[0]}: no process_name metadata")
        if track not in report.thread_names:
            report.problem(f"pid {track[0]} tid {track[1]}: no thread_name metadata")
    _check_nesting(report, slices)
    _bind_flows(report, slices, flow_ends["s"], flow_ends["f"])
    return report


def _metadata(report: ChromeReport, e: dict[str, Any], i: int) -> None:
    name = (e.get("args") or {}).get("name")
    if e.get("name") not in ("process_name", "thread_name"):
        return
    if not isinstance(name, str):
        report.problem(f"event {i} ({e.get('name')}): no args.name")
        return
    names = report.process_names if e["name"] == "process_name" else report.thread_names
    key = e["pid"] if e["name"] == "process_name" else (e["pid"], e["tid"])
    if key in names:
        report.problem(f"{e['name']} of {key} given twice")
    names[key] = name


def _check_nesting(report: ChromeReport, slices: dict[Track, list[Slice]]) -> None:
    """On one thread, slices nest or follow each other (a call inside a call)."""
    for track, items in slices.items():
        items.sort(key=lambda s: (s.start_ns, -s.end_ns))
        stack: list[Slice] = []
        for s in items:
            while stack and stack[-1].end_ns <= s.start_ns:
                stack.pop()
            if stack and s.end_ns > stack[-1].end_ns:
                report.problem(f"track {track}: {s.name} at {s.start_ns} ns overlaps "
                               f"{stack[-1].name} without nesting")
            stack.append(s)


def _bind_flows(report: ChromeReport, slices: dict[Track, list[Slice]],
                starts: dict[tuple, dict], ends: dict[tuple, dict]) -> None:
    """Each flow start binds to the innermost slice around it; each end to the
    next slice that begins at or after it (or, with "bp": "e", the one around it)."""
    for key in starts.keys() - ends.keys():
        report.problem(f"flow {key}: a start without an end")
    for key in ends.keys() - starts.keys():
        report.problem(f"flow {key}: an end without a start")
    begins = {t: [s.start_ns for s in items] for t, items in slices.items()}  # sorted above
    for key in sorted(starts.keys() & ends.keys(), key=lambda k: str(k[2])):
        s, f = starts[key], ends[key]
        src = _enclosing(slices, begins, (s["pid"], s["tid"]), _ns(s["ts"]))
        ftrack, fts = (f["pid"], f["tid"]), _ns(f["ts"])
        if f.get("bp") == "e":
            dst = _enclosing(slices, begins, ftrack, fts)
        else:
            j = bisect.bisect_left(begins.get(ftrack, []), fts)
            dst = slices[ftrack][j] if j < len(begins.get(ftrack, [])) else None
        if src is None or dst is None:
            report.problem(f"flow {key}: binds to no slice at its "
                           f"{'start' if src is None else 'end'}")
            continue
        report.flows.append((key[1], src, dst))
        report.tracks[src.track].flows_out += 1
        report.tracks[dst.track].flows_in += 1


def _enclosing(slices: dict[Track, list[Slice]], begins: dict[Track, list[int]],
               track: Track, ts: int) -> Slice | None:
    """The innermost slice of `track` that is running at `ts`."""
    items = slices.get(track, [])
    for j in range(bisect.bisect_right(begins.get(track, []), ts) - 1, -1, -1):
        if items[j].end_ns >= ts:
            return items[j]
    return None


def main(argv: list[str]) -> int:
    failed = False
    for path in argv:
        events, terminated = load_events(path)
        report = check_events(events, terminated)
        print(f"== {path}")
        print("\n".join(report.lines()))
        failed |= bool(report.problem_count) or not terminated
    return 1 if failed or not argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
