"""No call goes missing uncounted, with real uprobes:

- a function that calls itself on one thread: every level is a row, with its
  own arguments, result and out-parameter, in every mode of the BPF program
  (per-process uprobe_multi links and perf events, trace and stats, the
  thread's pairing slot and the hash), and calls nested past CP_MAX_DEPTH
  are counted as lost (`recursion_depth`);
- the end of a trace is one instant for every function: a malloc/free loop
  cut while it runs (by a stop signal, once each thread has made MARK pairs)
  is counted call for call (cudaMalloc = cudaFree, or one more where the cut
  fell between the two), its rows alternate to the last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from cudaprobe.probe.event import MAX_DEPTH

from ..conftest import build_workload, cudaprobe_cmd
from .conftest import expected_calls, run_cudaprobe, trace_jsonl
from .running import WAIT_S, Lines, started

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

MODES = {"multi": {}, "perf": {"CUDAPROBE_ATTACH": "perf"}}


def env_for(mode: str, pair_threads: str = "64") -> dict[str, str]:
    return {**os.environ, **MODES[mode], "CUDAPROBE_PAIR_THREADS": pair_threads}


def level_rows(calls: list[dict]) -> list[tuple[int, int, int, int]]:
    """(tid, size, ret, devPtr) of each cudaMalloc row, in the order they came."""
    return [(c["tid"], c["args"]["size"], c["ret"],
             int(c["args"]["devPtr"], 16) if c["ret"] == 0 else 0) for c in calls]


def workload_levels(stdout: str) -> list[tuple[int, int, int, int]]:
    """What the workload says each level did, in the order the levels returned."""
    return [(w["tid"], w["size"], w["ret"], w["ptr"]) for w in expected_calls(stdout)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair_threads", ["64", "1"], ids=["slots", "hash"])
def test_each_level_of_a_recursive_call_is_a_row(tmp_path, mode, pair_threads):
    # 10 calls recursing 3 deep, on each of 2 threads one after the other: with
    # one slot (hash), the second thread pairs in the hash, its nested calls too
    exe = build_workload("recursive_calls.c")
    calls, s, proc = trace_jsonl(tmp_path, "--lib", str(exe), "-e", "cudaMalloc",
                                 command=[str(exe), "10", "3", "2"],
                                 env=env_for(mode, pair_threads))
    assert proc.returncode == 0, proc.stderr
    made = workload_levels(proc.stdout)
    assert len(made) == 80
    assert level_rows(calls) == made  # exit order, sizes, results, pointers per level
    assert {size for _tid, size, _ret, _ptr in made} >= {4096, 4095, 4094, 4093}
    assert sum(1 for _tid, _size, ret, _ptr in made if ret == 2) == 8  # the third call's
    assert s["calls"] == s["rows"] == 80 and s["lost_total"] == 0 and s["in_flight"] == 0
    assert s["by_event"]["cudaMalloc"]["errors"] == {"cudaErrorMemoryAllocation": 8}
    # each level's row spans the ones nested in it
    by_size = {c["args"]["size"]: c for c in calls if c["tid"] == calls[0]["tid"]}
    for size in (4096, 4095, 4094):
        outer, inner = by_size[size], by_size[size - 1]
        assert outer["ts_ns"] < inner["ts_ns"]
        assert inner["ts_ns"] + inner["duration_ns"] <= outer["ts_ns"] + outer["duration_ns"]


@pytest.mark.parametrize("mode", MODES)
def test_stats_counts_each_level_of_a_recursive_call(tmp_path, mode):
    exe = build_workload("recursive_calls.c")
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--lib", str(exe), "-e", "cudaMalloc", "-o", str(out), "--",
                         str(exe), "10", "3", "1", env=env_for(mode))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    [f] = report["functions"]
    assert f["count"] == 40 and f["errors"] == {"cudaErrorMemoryAllocation": 4}
    assert report["lost"] == {"pairing_map_full": 0, "recursion_depth": 0}
    assert report["in_flight"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_calls_nested_past_the_depth_limit_are_counted_as_lost(tmp_path, mode):
    exe = build_workload("recursive_calls.c")
    depth = MAX_DEPTH + 8  # 41 levels: the outer 33 paired, the inner 8 counted
    calls, s, proc = trace_jsonl(tmp_path, "--lib", str(exe), "-e", "cudaMalloc",
                                 command=[str(exe), "1", str(depth), "1"], env=env_for(mode))
    assert proc.returncode == 0, proc.stderr
    made = workload_levels(proc.stdout)
    assert len(made) == depth + 1
    assert level_rows(calls) == made[-(MAX_DEPTH + 1):]  # the outermost levels, whole
    assert s["lost"]["recursion_depth"] == 8
    assert s["rows"] + s["lost_total"] == len(made)
    assert "recursion_depth=8" in proc.stderr


def alternating(calls: list[dict]) -> dict[int, list[str]]:
    """Per thread, its functions in the order its calls began."""
    seq: dict[int, list[str]] = {}
    for c in sorted(calls, key=lambda c: c["ts_ns"]):
        seq.setdefault(c["tid"], []).append(c["event"])
    return seq


MARK = 1000  # pairs each thread of the loop has made when its trace is cut


def run_cut(tmp_path: Path, argv: list[str], env: dict[str, str]) -> None:
    """cudaprobe ARGV -- malloc_free_threads (forever), stopped by SIGTERM as soon
    as each of the loop's 2 threads has made MARK pairs: the trace ends with the
    loop running, on any machine; the loop, left running, is then killed."""
    exe = build_workload("malloc_free_threads.c")
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:  # a file, not a pipe: the loop keeps it open
        proc = started(subprocess.Popen(
            cudaprobe_cmd(*argv, "--", str(exe), "1000000000", "2", str(MARK)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env))
    out, pid = Lines(proc.stdout), None
    try:
        pid = json.loads(out.wait_for(lambda s: s.startswith('{"pid"'), "the loop's pid"))["pid"]
        out.wait_for(lambda s: s.startswith('{"made"'), f"{MARK} pairs in each thread")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 128 + signal.SIGTERM, err.read_text()
        assert f"(pid {pid}) keeps running" in err.read_text()  # cut with the loop running
    finally:  # cudaprobe, if still running, after the test (running.kill_left_running)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", MODES)
def test_stats_cut_mid_loop_counts_malloc_and_free_call_for_call(tmp_path, mode):
    # before the probes came off all at once, cudaFree outlived cudaMalloc by
    # ~4 ms: 373,585 cudaMalloc and 376,615 cudaFree in one second
    for run in range(3):
        out = tmp_path / f"stats{run}.json"
        run_cut(tmp_path, ["stats", "-e", "cudaMalloc,cudaFree", "-o", str(out)], env_for(mode))
        report = json.loads(out.read_text())
        count = {f["event"]: f["count"] for f in report["functions"]}
        assert count["cudaMalloc"] >= 2 * MARK  # every call from the first is counted
        # 2 threads: each may be cut between its cudaMalloc and its cudaFree
        assert 0 <= count["cudaMalloc"] - count["cudaFree"] <= 2, count
        assert report["lost"]["pairing_map_full"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_trace_cut_mid_loop_ends_with_whole_loops(tmp_path, mode):
    for run in range(3):
        out = tmp_path / f"calls{run}.jsonl"
        run_cut(tmp_path, ["trace", "-e", "cudaMalloc,cudaFree", "-o", str(out)], env_for(mode))
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        s = lines[-1]["summary"]
        assert s["lost_total"] == 0
        rows = [c for c in lines[:-1] if c["duration_ns"] is not None]
        for tid, seq in alternating(rows).items():
            # from the first call to the last: cudaMalloc, cudaFree, ... and at
            # most a cudaMalloc without its cudaFree at the cut
            assert len(seq) >= 2 * MARK
            assert seq[0::2] == ["cudaMalloc"] * len(seq[0::2]), tid
            assert seq[1::2] == ["cudaFree"] * len(seq[1::2]), tid
        # the kernel's counts agree with the rows
        by_event = s["by_event"]
        assert by_event["cudaMalloc"]["calls"] == sum(r["event"] == "cudaMalloc" for r in rows)
        assert 0 <= by_event["cudaMalloc"]["calls"] - by_event["cudaFree"]["calls"] <= 2


def test_a_loop_traced_whole_is_counted_as_the_workload_made_it(tmp_path):
    # the command is held until every probe is in and tracing has started:
    # its first call is traced, in every function
    exe = build_workload("malloc_free_threads.c")
    for run in range(3):
        out = tmp_path / f"stats{run}.json"
        proc = run_cudaprobe("stats", "-e", "cudaMalloc,cudaFree", "-o", str(out), "--",
                             str(exe), "100000", "2")
        assert proc.returncode == 0, proc.stderr
        [made] = [w["calls"] for w in expected_calls(proc.stdout)]
        count = {f["event"]: f["count"] for f in json.loads(Path(out).read_text())["functions"]}
        assert count == {"cudaMalloc": made // 2, "cudaFree": made // 2}
