"""In-kernel stats without the kernel: per-CPU merging, percentiles from log2
buckets, the JSON report, --compare, and the table."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from cudaprobe.analysis.stats import (
    HIST_SLOTS,
    SCALARS,
    SORT_KEYS,
    FunctionStats,
    StatsReport,
    collect,
    combine_cpus,
    percentile,
    slot_bounds,
    slot_of,
)
from cudaprobe.analysis.stats_compare import Change, compare, load_report
from cudaprobe.catalogue import functions as catalogue
from cudaprobe.errors import UsageError
from cudaprobe.output.compare_view import render_changes
from cudaprobe.output.stats_view import render_stats
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import Probe

from .cprobe import c_values


def cpu_value(durations: list[int], unkeyed: int = 0) -> tuple[int, ...]:
    """One CPU's struct cp_stat, as the BPF program would leave it after `durations`."""
    hist, hist_ns = [0] * HIST_SLOTS, [0] * HIST_SLOTS
    for d in durations:
        hist[slot_of(d)] += 1
        hist_ns[slot_of(d)] += d
    if not durations:
        return (0, 0, 0, 0, unkeyed, *hist, *hist_ns)
    return (len(durations), sum(durations), min(durations), max(durations), unkeyed,
            *hist, *hist_ns)


def stats_of(durations: list[int]) -> FunctionStats:
    return combine_cpus([cpu_value(durations)])


def test_slots_are_floor_log2_and_clamped():
    assert [slot_of(n) for n in (0, 1, 2, 3, 4, 1023, 1024)] == [0, 0, 1, 1, 2, 9, 10]
    assert slot_of(1 << 60) == HIST_SLOTS - 1
    for k in (1, 10, 30):
        lo, hi = slot_bounds(k)
        assert slot_of(lo) == k and slot_of(hi - 1) == k and slot_of(hi) == k + 1
    assert slot_bounds(0) == (0, 2)


def test_one_call_is_exact():
    s = stats_of([1500])
    assert s.p(50) == s.p(99) == s.min_ns == s.max_ns == s.avg_ns == 1500


def test_percentiles_of_a_tight_cluster_across_a_slot_boundary():
    # 7 calls just under 1024 ns, 3 just over: the median is near 1000, not mid-slot
    s = stats_of([1000, 1001, 1002, 1003, 1005, 1010, 1020, 1030, 1040, 1050])
    assert 1000 <= s.p(50) <= 1020
    assert 1030 <= s.p(95) <= 1050
    assert s.p(100) <= 1050


def test_percentiles_of_two_groups_land_in_their_slots():
    durations = [700_000 + i for i in range(100)] + [20_000_000 + i for i in range(10)]
    s = stats_of(durations)
    assert slot_of(s.p(50)) == slot_of(700_000)
    assert slot_of(s.p(95)) == slot_of(20_000_000) and slot_of(s.p(99)) == slot_of(20_000_000)
    assert s.min_ns <= s.p(50) <= s.p(95) <= s.p(99) <= s.max_ns


def test_estimate_is_within_its_slot():
    durations = [3, 17, 250, 251, 4096, 5000, 70_000, 1 << 20, 3 << 20, 1 << 33]
    s = stats_of(durations)
    for q in (10, 25, 50, 75, 90, 99):
        exact = sorted(durations)[max(0, -(-q * len(durations) // 100) - 1)]
        assert slot_of(s.p(q)) == slot_of(exact), q


def test_empty_histogram():
    assert percentile([0] * HIST_SLOTS, [0] * HIST_SLOTS, 50, 0, 0) == 0


def test_cpus_combine_min_over_cpus_that_saw_calls():
    s = combine_cpus([cpu_value([]), cpu_value([600, 900], unkeyed=1), cpu_value([300, 5000])])
    assert (s.count, s.total_ns, s.min_ns, s.max_ns, s.errors_unkeyed) == (4, 6800, 300, 5000, 1)
    assert sum(s.hist) == 4 and sum(s.hist_ns) == 6800
    assert s.hist[slot_of(300)] == 1 and s.hist[slot_of(600)] == 2  # 600 and 900 share a slot
    assert s.hist_ns[slot_of(600)] == 1500


def probes() -> list[Probe]:
    return [Probe(0, "cudaMalloc", catalogue.BY_NAME["cudaMalloc"]),
            Probe(1, "cudaFree", catalogue.BY_NAME["cudaFree"]),
            Probe(2, "cudaMemcpy_ptds", catalogue.BY_NAME["cudaMemcpy"])]


def test_collect_names_errors_and_skips_uncalled_probes():
    raw = {0: [cpu_value([1000] * 3), cpu_value([2000])], 1: [cpu_value([])], 2: [cpu_value([10])]}
    errors = {(0, 35): 3, (0, 2): 1, (2, 35): 0}
    found = {s.event: s for s in collect(probes(), raw, errors)}
    assert set(found) == {"cudaMalloc", "cudaMemcpy_ptds"}
    malloc = found["cudaMalloc"]
    assert malloc.count == 4 and malloc.failed == 4 and malloc.category == "memory"
    assert malloc.errors == {"cudaErrorInsufficientDriver": 3, "cudaErrorMemoryAllocation": 1}
    assert found["cudaMemcpy_ptds"].errors == {}


def report() -> StatsReport:
    raw = {0: [cpu_value([1000] * 3)], 1: [cpu_value([100_000])], 2: [cpu_value([50] * 10)]}
    return StatsReport(collect(probes(), raw, {(0, 35): 3}), duration_s=1.23456,
                       libraries=["/lib/libcudart.so.13"], lost={"pairing_map_full": 0})


def test_json_schema():
    d = json.loads(json.dumps(report().to_dict()))
    assert d["cudaprobe"] == "stats" and d["schema"] == 1 and d["calls"] == 14
    assert d["duration_s"] == 1.235 and d["lost_total"] == 0 and "log2" in d["percentiles"]
    assert [f["event"] for f in d["functions"]] == ["cudaFree", "cudaMalloc", "cudaMemcpy_ptds"]
    malloc = d["functions"][1]
    assert set(malloc) == {"event", "api", "category", "count", "total_ns", "avg_ns", "min_ns",
                           "max_ns", "p50_ns", "p95_ns", "p99_ns", "failed", "errors",
                           "histogram"}
    assert malloc["errors"] == {"cudaErrorInsufficientDriver": 3} and malloc["failed"] == 3
    assert malloc["histogram"] == [{"lo_ns": 512, "hi_ns": 1024, "count": 3, "total_ns": 3000}]


@pytest.mark.parametrize("key,first", [("total", "cudaFree"), ("count", "cudaMemcpy_ptds"),
                                       ("errors", "cudaMalloc"), ("name", "cudaFree"),
                                       ("min", "cudaFree"), ("p99", "cudaFree")])
def test_sort_keys(key, first):
    assert report().sorted(key)[0].event == first
    assert set(SORT_KEYS) >= {"total", "count", "avg", "min", "max", "p50", "p95", "p99"}


def test_table_escapes_names_and_says_how_percentiles_are_made():
    r = report()
    r.functions[0].event = "tr[ai]n"
    out = io.StringIO()
    render_stats(r, Console(file=out, width=200), "total")
    text = out.getvalue()
    assert "tr[ai]n" in text and "estimated from log2" in text
    for col in ("CALLS", "TOTAL", "AVG", "MIN", "MAX", "P50", "P95", "P99", "ERRORS"):
        assert col in text
    assert "cudaErrorInsufficientDriver x3" in text  # whole where there is room
    assert "14 calls in 1.23s, 0 still in flight, 0 lost" in text


def doc(**functions: tuple[int, int]) -> dict:
    return {"functions": [{"event": k, "count": c, "p50_ns": p} for k, (c, p) in
                          functions.items()]}


def test_compare_flags_counts_and_p50_beyond_threshold():
    before = doc(a=(100, 1000), b=(100, 1000), c=(100, 1000), gone=(5, 10))
    after = doc(a=(120, 1200), b=(121, 1000), c=(100, 1201), new=(1, 10))
    changes = compare(before, after, threshold=20, min_calls=10)
    assert changes == [Change("b", "count", 100, 121), Change("c", "p50_ns", 1000, 1201),
                       Change("gone", "count", 5, 0), Change("new", "count", 0, 1)]
    assert changes[0].percent == 21 and changes[3].percent is None
    assert changes[3].to_dict() == {"event": "new", "metric": "count", "before": 0, "after": 1,
                                    "percent": None}


def test_compare_skips_p50_of_few_calls():
    assert compare(doc(a=(5, 1000)), doc(a=(5, 9000)), 20, min_calls=10) == []
    assert compare(doc(a=(5, 1000)), doc(a=(5, 9000)), 20, min_calls=5) == [
        Change("a", "p50_ns", 1000, 9000)]


def test_compare_renders(tmp_path):
    out = io.StringIO()
    render_changes([Change("cudaMalloc", "p50_ns", 1000, 2000), Change("x", "count", 0, 3)],
                   Console(file=out, width=200), "base.json", 20)
    assert "+100%" in out.getvalue() and "new" in out.getvalue() and "p50" in out.getvalue()
    out = io.StringIO()
    render_changes([], Console(file=out, width=200), "base.json", 20)
    assert "no count or p50 moved more than 20%" in out.getvalue()


def test_baseline_must_be_a_stats_report(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report().to_dict()))
    assert load_report(str(good))["functions"]
    for name, text in (("trace.json", '{"summary": {}}'), ("bad.json", "{"),
                       ("v9.json", '{"cudaprobe": "stats", "schema": 9}')):
        (tmp_path / name).write_text(text)
        with pytest.raises(UsageError):
            load_report(str(tmp_path / name))
    with pytest.raises(UsageError):
        load_report(str(tmp_path / "missing.json"))


def test_stats_mode_cflags():
    plan = probes()
    d = bpfprog.defines(plan, bpfprog.Settings(stats=True, attach="multi"))
    assert d["CP_NR_PROBES"] == "3" and "CP_RINGBUF_PAGES" not in d  # no ring buffer
    assert "CP_RINGBUF_PAGES" in bpfprog.defines(plan, bpfprog.Settings(attach="multi"))
    assert "then bpf/stats.bpf.c" in bpfprog.render(plan, bpfprog.Settings(stats=True))


LAYOUT = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>
#include "cudaprobe.h"
int main(void) {
    printf("size %zu\nhist %zu\nhist_ns %zu\nunkeyed %zu\nslots %d\nkey %zu\n"
           "err_ret %zu\nerr_count %zu\nerr_slots %d\n", sizeof(struct cp_stat),
           offsetof(struct cp_stat, hist), offsetof(struct cp_stat, hist_ns),
           offsetof(struct cp_stat, errors_unkeyed), CP_HIST_SLOTS, sizeof(struct cp_error_key),
           offsetof(struct cp_stat, err_ret), offsetof(struct cp_stat, err_count), CP_ERR_SLOTS);
    return 0;
}
"""


def test_stat_struct_matches_header(tmp_path):
    v = c_values(tmp_path, LAYOUT)
    size, hist, hist_ns, unkeyed, slots, key, err_ret, err_count, err_slots = (
        v[k] for k in ("size", "hist", "hist_ns", "unkeyed", "slots", "key", "err_ret",
                       "err_count", "err_slots"))
    assert slots == HIST_SLOTS
    assert (hist, unkeyed) == (8 * SCALARS, 8 * (SCALARS - 1))
    # the return codes after the histogram: read by name (MapReader.read_errors), not by offset
    assert hist_ns == hist + 8 * HIST_SLOTS and err_ret == hist_ns + 8 * HIST_SLOTS
    assert err_count == err_ret + 8 * err_slots and size == err_count + 8 * err_slots
    assert key == 8


def test_a_baseline_is_checked_whole_before_anything_runs(tmp_path):
    """Entries compare() could not read, and bytes that are not UTF-8: one line."""
    entry = report().to_dict()["functions"][0]
    bad = {"count many": [{**entry, "count": "many"}], "functions null": None,
           "no event": [{k: v for k, v in entry.items() if k != "event"}],
           "p50 negative": [{**entry, "p50_ns": -1}], "count true": [{**entry, "count": True}]}
    for name, functions in bad.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**report().to_dict(), "functions": functions}))
        with pytest.raises(UsageError, match="is not a list of entries"):
            load_report(str(path))
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'{"cudaprobe": "stats", "x": "\xe9"}')
    with pytest.raises(UsageError, match="is not JSON"):
        load_report(str(latin))
