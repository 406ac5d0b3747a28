"""The trace summary: per-function counts from the rows, or from the kernel's
tally of every call, with the rows and the losses beside them."""

from __future__ import annotations

import io
from collections import Counter

from rich.console import Console

from cudaprobe.analysis.summary import ATTACH, UNKNOWN_CODE, Summary, Untraced
from cudaprobe.catalogue import functions as catalogue
from cudaprobe.output.summary_view import render_summary
from cudaprobe.probe.event import CallTally
from cudaprobe.probe.plan import Probe

PROBES = [Probe(0, "cudaMalloc", catalogue.BY_NAME["cudaMalloc"]),
          Probe(1, "cuMemAlloc_v2", catalogue.BY_NAME["cuMemAlloc"]),
          Probe(2, "cudaFree", catalogue.BY_NAME["cudaFree"])]


def rows_seen() -> Summary:
    """What the record loop added: 3 rows of cudaMalloc, 2 of them failed."""
    s = Summary()
    s.add_counts("cudaMalloc", 3, 3000, Counter({"cudaErrorInsufficientDriver": 2}))
    s.lost = {"ringbuf_full": 997, "pairing_map_full": 0, "wakeups": 5}
    s.duration_s = 1.0
    return s


def rendered(s: Summary) -> str:
    buf = io.StringIO()
    render_summary(s, Console(file=buf, width=120))
    return buf.getvalue()


def test_kernel_counts_are_the_calls_and_the_rows_stay_beside():
    s = rows_seen()
    s.take_kernel_counts(PROBES, {
        0: CallTally(1000, 2_000_000, {35: 990, 2: 3}, errors_unkeyed=1),
        1: CallTally(4, 40, {100: 4}),  # a driver code: named by the driver's table
        2: CallTally(0, 0, {}),  # never called: no row in the summary
    })
    d = s.to_dict()
    assert d["calls"] == 1004 and d["rows"] == 3
    assert d["by_event"] == {
        "cudaMalloc": {"calls": 1000, "total_ns": 2_000_000, "errors": {
            "cudaErrorInsufficientDriver": 990, "cudaErrorMemoryAllocation": 3,
            UNKNOWN_CODE: 1}},
        "cuMemAlloc_v2": {"calls": 4, "total_ns": 40, "errors": {"CUDA_ERROR_NO_DEVICE": 4}},
    }
    assert d["lost"] == {"ringbuf_full": 997, "pairing_map_full": 0}  # not folded in
    assert d["lost_total"] == 997
    text = rendered(s)
    assert "1004 calls in 1.00s, 3 as rows, 0 still in flight, 997 lost (ringbuf_full=997)" in text
    assert "2.0µs" in text  # cudaMalloc's average: 2 ms over 1000 calls, not over 3 rows


def test_without_kernel_counts_the_rows_are_the_calls():
    s = rows_seen()
    d = s.to_dict()
    assert d["calls"] == d["rows"] == 3
    assert d["by_event"]["cudaMalloc"] == {"calls": 3, "total_ns": 3000,
                                           "errors": {"cudaErrorInsufficientDriver": 2}}
    assert "3 calls in 1.00s, 0 still in flight, 997 lost" in rendered(s)


def test_spans_not_traced_are_said_one_by_one_then_counted():
    s = rows_seen()
    s.untraced = [Untraced(42, "loop", 3.5, ATTACH),
                  *(Untraced(100 + i, "child", 0.25, "/opt/x/libcudart.so.13") for i in range(6))]
    d = s.to_dict()
    assert d["untraced"][0] == {"pid": 42, "process": "loop", "up_to_s": 3.5,
                                "before": "the attach"}
    assert len(d["untraced"]) == 7
    text = rendered(s)
    assert ("not traced: pid 42 (loop) ran 3.50s before the attach: its calls until then, and "
            "those under way then, are not included") in text
    assert ("not traced: pid 100 (child) mapped /opt/x/libcudart.so.13 up to 0.25s before it "
            "was probed") in text
    assert "pid 103 (child)" in text and "pid 104 (child)" not in text  # 5 said
    assert "not traced: 2 more such spans" in text


def test_a_span_of_a_child_linked_at_its_making_is_said_to_the_microsecond():
    s = rows_seen()
    s.untraced = [Untraced(43, "python", 0.000421, ATTACH)]
    assert s.to_dict()["untraced"][0]["up_to_s"] == 0.000421
    assert "pid 43 (python) ran 0.42ms before the attach" in rendered(s)


def test_a_span_not_timed_is_said_without_a_length():
    """A child gone as it was linked (its age no longer readable): its span is
    still said, with no length made up."""
    s = rows_seen()
    s.untraced = [Untraced(44, "python", 0.0, ATTACH)]
    assert s.to_dict()["untraced"][0]["up_to_s"] == 0
    assert ("pid 44 (python) ran for a time not known before the attach: its calls until "
            "then") in rendered(s)


def test_nothing_missed_says_nothing():
    s = rows_seen()
    assert s.to_dict()["untraced"] == []
    assert "not traced" not in rendered(s)
