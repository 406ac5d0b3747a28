"""decode.nesting.CallOrder: records, which arrive as calls return (a nested call
before its parent), put back in call order with their depth and parent; what
it holds is bounded; the reporters write depth and parent."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console
from rich.text import Text

from cudaprobe.catalogue.functions import RUNTIME
from cudaprobe.decode.nesting import CallOrder
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output.formats import REPORTERS
from cudaprobe.output.table import TableReporter
from cudaprobe.probe.event import R_TS, RECORD_STRUCTS

from .eventbuild import EVERY_PROBE

FID = {p.symbol: p.func_id for p in EVERY_PROBE}
IS_RUNTIME = [p.function.api == RUNTIME for p in EVERY_PROBE]
MS = 1_000_000


def rec(symbol: str, start_ms: float, end_ms: float, tid: int = 8, inside: int = 0) -> tuple:
    """A record of `symbol` on thread `tid`, from start_ms to end_ms (no arguments
    read: the words are zeros); `inside`: marked by the probe as made inside an
    NCCL call (the caller word, CP_OUTER)."""
    probe = EVERY_PROBE[FID[symbol]]
    nargs = probe.function.words
    layout = RECORD_STRUCTS[nargs]
    values = (int(start_ms * MS), int((end_ms - start_ms) * MS), 7, tid, probe.func_id, nargs,
              0, 0, b"app", inside, -1, *([0] * nargs))
    return layout.unpack(layout.pack(*values))


def names(out: list[tuple]) -> list[str]:
    return [EVERY_PROBE[r[4]].symbol for r in out]


def order(clock_ms: float = 0.0, **kw) -> CallOrder:
    return CallOrder(IS_RUNTIME, clock=lambda: int(clock_ms * MS), **kw)


def test_a_driver_call_made_inside_a_runtime_call_comes_under_it():
    # the trace: cuDriverGetVersion (at 35.752) arrived before the
    # cudaGetDeviceCount (at 29.685) that made it
    o = order()
    inner = rec("cuDriverGetVersion", 35.752, 35.760)
    outer = rec("cudaGetDeviceCount", 29.685, 36.0)
    assert o.add([inner]) == ([], [])  # held: its parent may be on the way
    out, marks = o.add([outer])
    assert names(out) == ["cudaGetDeviceCount", "cuDriverGetVersion"]
    assert marks == [(0, None), (1, outer[R_TS])]


def test_nesting_goes_deeper_and_calls_outside_come_first_at_the_top():
    o = order()
    before = rec("cuInit", 1, 2)  # made by the program itself, before
    leaf = rec("cuDriverGetVersion", 4, 5)
    mid = rec("cuInit", 3, 6)  # (a driver call that made another)
    sibling = rec("cuDeviceGetCount", 7, 8)
    top = rec("cudaGetDeviceCount", 2.5, 9)
    out, marks = o.add([before, leaf, mid, sibling, top])
    assert names(out) == ["cuInit", "cudaGetDeviceCount", "cuInit", "cuDriverGetVersion",
                          "cuDeviceGetCount"]
    assert marks == [(0, None), (0, None), (1, top[R_TS]), (2, mid[R_TS]), (1, top[R_TS])]


def test_threads_are_ordered_apart():
    o = order()
    out, marks = o.add([rec("cuDriverGetVersion", 4, 5, tid=1), rec("cudaMalloc", 1, 2, tid=2),
                        rec("cudaGetDeviceCount", 3, 6, tid=1)])
    assert names(out) == ["cudaMalloc", "cudaGetDeviceCount", "cuDriverGetVersion"]
    assert marks == [(0, None), (0, None), (1, 3 * MS)]


def test_a_driver_call_alone_waits_at_most_the_hold():
    o = order(clock_ms=100.0, hold_ns=10 * MS)
    assert o.add([rec("cuInit", 1, 2)]) == ([], [])
    # newer calls of other threads move time on: 2 ms is not yet 10 ms before 11.5 ms
    assert names(o.add([rec("cudaMalloc", 11, 11.5, tid=9)])[0]) == ["cudaMalloc"]
    out, marks = o.add([rec("cudaMalloc", 12, 12.5, tid=9)])
    assert names(out) == ["cudaMalloc", "cuInit"] and marks == [(0, None), (0, None)]
    # a poll that found nothing: the clock says how old a held call is
    assert o.add([rec("cuInit", 95, 96)]) == ([], [])
    late = order(clock_ms=200.0, hold_ns=10 * MS)
    late._held, late._count = o._held, o._count
    assert names(late.add([])[0]) == ["cuInit"]


def test_a_parent_open_longer_than_the_hold_comes_without_its_children():
    o = order(hold_ns=10 * MS)
    o.add([rec("cuInit", 1, 2)])
    out, _ = o.add([rec("cudaMalloc", 20, 21, tid=9)])  # time moves on: cuInit goes alone
    assert names(out) == ["cudaMalloc", "cuInit"]
    out, marks = o.add([rec("cudaGetDeviceCount", 0.5, 30)])
    assert names(out) == ["cudaGetDeviceCount"] and marks == [(0, None)]


def test_what_is_held_is_bounded_in_number():
    o = order(max_held=3)
    out, _ = o.add([rec("cuInit", t, t + 0.5, tid=t) for t in range(1, 6)])
    assert names(out) == ["cuInit", "cuInit"] and [r[3] for r in out] == [1, 2]
    assert o._count == 3
    out, marks = o.flush()
    assert [r[3] for r in out] == [3, 4, 5] and o._count == 0 and o.flush() == ([], [])


def test_what_is_held_beyond_the_bound_goes_oldest_first_across_threads():
    """A driver-only program (no runtime call adopts its calls): each thread's
    calls held beyond the bound go in time order across threads, a tie to the
    thread held first."""
    o = order(max_held=2)
    recs = [rec("cuInit", t, t + 0.1, tid=tid) for tid, t in
            ((1, 1), (2, 2), (1, 3), (2, 4), (1, 5), (2, 6), (1, 7), (2, 8))]
    out, _ = o.add(recs)
    assert [(r[3], r[0] // MS) for r in out] == [(1, 1), (2, 2), (1, 3), (2, 4), (1, 5), (2, 6)]
    o = order(max_held=1)
    out, _ = o.add([rec("cuInit", 1, 1.1, tid=1), rec("cuInit", 2, 2.1, tid=2),
                    rec("cuInit", 2, 2.2, tid=1), rec("cuInit", 3, 3.1, tid=2)])
    assert [(r[3], r[0] // MS) for r in out] == [(1, 1), (1, 2), (2, 2)]
    assert [(r[3], r[0] // MS) for r in o.flush()[0]] == [(2, 3)]


def batch() -> tuple[list[tuple], list]:
    o = order()
    return o.add([rec("cuDriverGetVersion", 35.752, 35.760),
                  rec("cudaGetDeviceCount", 29.685, 36.0)])


def test_jsonl_and_csv_rows_carry_depth_and_parent():
    out, marks = batch()
    for fmt in ("jsonl", "json", "csv"):
        buf = io.StringIO()
        r = REPORTERS[fmt](buf)
        r.start()
        r.records(out, RecordDecoder(EVERY_PROBE, 0), marks)
        # and the same of Calls (in flight at the end, or a reporter given Calls)
        r.calls(RecordDecoder(EVERY_PROBE, 0).calls(out, marks))
        text = buf.getvalue()
        if fmt == "jsonl":
            rows = [json.loads(line) for line in text.splitlines()]
        elif fmt == "json":
            rows = json.loads(text + "]}")["calls"]
        else:
            rows = list(csv.DictReader(io.StringIO(text)))
            for row in rows:
                row["depth"] = int(row["depth"])
                row["parent"] = int(row["parent"]) if row["parent"] else None
        assert [(x["event"], x["depth"], x["parent"]) for x in rows] == [
            ("cudaGetDeviceCount", 0, None), ("cuDriverGetVersion", 1, 29_685_000)] * 2, fmt


def test_the_table_indents_a_call_under_its_parent():
    out, marks = batch()
    buf = io.StringIO()
    r = TableReporter(buf, console=Console(file=buf, width=120, force_terminal=True,
                                            no_color=True))
    r.records(out, RecordDecoder(EVERY_PROBE, 0), marks)
    lines = Text.from_ansi(buf.getvalue()).plain.splitlines()
    event_at = lines[0].index("cudaGetDeviceCount")
    assert lines[1][event_at:].startswith("  cuDriverGetVersion")


def test_calls_in_an_nccl_group_come_under_its_start():
    # PyTorch's send: ncclGroupStart, ncclSend, ncclGroupEnd (which queues the
    # kernel: cuLaunchKernelEx under it); then a collective outside any group
    steps = [{"ncclGroupStart": 1, "ncclGroupEnd": -1}.get(p.function.name, 0)
             for p in EVERY_PROBE]
    runtime_or_nccl = [p.function.api in (RUNTIME, "nccl") for p in EVERY_PROBE]
    o = CallOrder(runtime_or_nccl, clock=lambda: 0, groups=steps)
    start = rec("ncclGroupStart", 1.0, 1.1)
    inner_start = rec("ncclGroupStart", 1.2, 1.3)  # groups nest
    send = rec("ncclSend", 1.4, 1.5)
    inner_end = rec("ncclGroupEnd", 1.6, 1.7)
    launch = rec("cuLaunchKernelEx", 1.85, 1.9)
    end = rec("ncclGroupEnd", 1.8, 2.0)
    after = rec("ncclAllReduce", 3.0, 3.1)
    out, marks = o.add([start, inner_start, send, inner_end])
    out2, marks2 = o.add([launch, end, after])
    assert names(out + out2) == ["ncclGroupStart", "ncclGroupStart", "ncclSend", "ncclGroupEnd",
                                 "ncclGroupEnd", "cuLaunchKernelEx", "ncclAllReduce"]
    assert marks + marks2 == [(0, None), (1, start[R_TS]), (2, inner_start[R_TS]),
                              (1, start[R_TS]), (0, None), (1, end[R_TS]), (0, None)]
    # another thread's calls are in no group
    other = rec("ncclAllReduce", 1.45, 1.46, tid=9)
    o2 = CallOrder(runtime_or_nccl, clock=lambda: 0, groups=steps)
    assert o2.add([start, other])[1] == [(0, None), (0, None)]


def test_calls_made_inside_an_nccl_call_come_under_it():
    # ncclBcast calls ncclBroadcast, which calls the runtime (cudaGetDevice, in
    # libnccl's own copy), which calls the driver; each marked by the probe as
    # made inside an NCCL call, so held until the outermost arrives. A runtime
    # call not marked (the program's own, before) goes out at once.
    runtime_or_nccl = [p.function.api in (RUNTIME, "nccl") for p in EVERY_PROBE]
    o = CallOrder(runtime_or_nccl, clock=lambda: 0)
    before = rec("cudaMalloc", 0.5, 0.6)
    driver = rec("cuCtxGetDevice", 1.3, 1.35)
    runtime = rec("cudaGetDevice", 1.2, 1.4, inside=1)
    inner = rec("ncclBroadcast", 1.1, 1.8, inside=1)
    outer = rec("ncclBcast", 1.0, 2.0)
    out, marks = o.add([before, driver, runtime])
    assert names(out) == ["cudaMalloc"] and marks == [(0, None)]
    assert o.add([inner]) == ([], [])  # marked: held, though an NCCL call
    out, marks = o.add([outer])
    assert names(out) == ["ncclBcast", "ncclBroadcast", "cudaGetDevice", "cuCtxGetDevice"]
    assert marks == [(0, None), (1, outer[R_TS]), (2, inner[R_TS]), (3, runtime[R_TS])]
