"""Whatever the probes produce, every format gives every row.

Four unpaced threads each call a failing cudaMalloc and cudaFree 20,000
times (tests/workloads/malloc_free_threads.c): on the 2-core CPU machine the
probes then produce more records a second than any format decodes. The
reader process spools them (probe/ringbuf.py); every format must end with
160,000 rows, the summary's count with them. The ring buffer is made big
enough for the whole run (--ringbuf-pages: 32 MiB for ~14 MB of records),
so that no record can be dropped however slowly a loaded machine reads it:
whether the reader keeps up with the default ring at full speed is a
measure of speed, kept by the benchmark (scripts/bench --only threads4).
"""

from __future__ import annotations

import csv
import json
import os
import re

import pytest

from ..conftest import HANG_S, build_workload
from .conftest import run_cudaprobe
from .running import build_loop

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

PAIRS, THREADS = 20_000, 4
CALLS = 2 * PAIRS * THREADS
LAUNCHES = 60_000
POINTER = re.compile(r"0x[0-9a-f]+")  # (addresses differ from run to run)
RING_PAGES = "8192"  # 32 MiB with 4 KiB pages: every record of the run at once
ROW = re.compile(r" *\d+\.\d{3} .* (cudaMalloc|cudaFree) ")  # a table row: TIME(ms) first
SUMMARY = re.compile(r"(\d+) calls in [\d.]+s, (\d+) still in flight, (\d+) lost")


def rows(path, fmt: str) -> int:
    lines = path.read_text().splitlines()
    if fmt == "jsonl":
        return sum(1 for line in lines if not line.startswith('{"summary"'))
    if fmt == "csv":
        return len(lines) - 1  # the header
    if fmt == "chrome":
        events = [json.loads(line.rstrip(",")) for line in lines[1:-1]]
        return sum(1 for e in events if e.get("ph") == "X")
    return sum(1 for line in lines if ROW.match(line))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "chrome", "table"])
def test_four_unpaced_threads_give_every_row(tmp_path, libcudart, fmt):
    exe = build_workload("malloc_free_threads.c")
    out = tmp_path / "calls.out"
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc,cudaFree",
                         "-f", fmt, "-o", str(out), "--ringbuf-pages", RING_PAGES, "--", str(exe),
                         str(PAIRS), str(THREADS),
                         timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["calls"] == CALLS
    m = SUMMARY.search(proc.stderr if fmt != "table" else out.read_text())
    assert m, proc.stderr
    calls, in_flight, lost = map(int, m.groups())
    assert rows(out, fmt) == calls
    assert in_flight == 0
    assert calls + lost == CALLS  # nothing vanishes
    assert lost == 0, f"{lost} lost, with room for every record ({proc.stderr[-300:]})"


def made_calls(path, fmt: str) -> list[dict]:
    """Each call's row as a dict: event, tid, ts_ns, ret, ret_name, args, details
    (Chrome's slices: their name, track and start, the rest from their args)."""
    text = path.read_text()
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines()[:-1]]
    if fmt == "csv":
        return list(csv.DictReader(text.splitlines()))
    calls = []
    for e in json.loads(text):
        if e.get("ph") == "X":
            args = e["args"]
            calls.append({"event": e["name"], "tid": e["tid"], "ts_ns": round(e["ts"] * 1000),
                          "ret": args.pop("ret"), "ret_name": args.pop("ret_name"),
                          "details": args.pop("details"), "args": args, "depth": None})
    return calls


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "chrome"])
def test_a_backlog_made_into_rows_by_forked_children_is_whole_and_in_order(tmp_path, libcudart,
                                                                          fmt):
    """The same run with two children making the rows of the backlog
    (CUDAPROBE_DECODE_WORKERS=2; by default only on 4 cores or more): every
    row, each thread's rows in the order it made its calls (a cudaMalloc, then
    its cudaFree, 20,000 times), every row whole, as the thread alone writes
    them but for the times."""
    exe = build_workload("malloc_free_threads.c")
    outs = {}
    for workers in ("0", "2"):
        out = tmp_path / f"calls-{workers}.out"
        proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc,cudaFree",
                             "-f", fmt, "-o", str(out), "--ringbuf-pages", RING_PAGES, "--",
                             str(exe), str(PAIRS), str(THREADS), timeout=HANG_S,
                             env={**os.environ, "CUDAPROBE_DECODE_WORKERS": workers})
        assert proc.returncode == 0, proc.stderr
        assert rows(out, fmt) == CALLS, proc.stderr[-300:]
        calls = made_calls(out, fmt)
        by_thread: dict[str, list] = {}
        for c in calls:
            by_thread.setdefault(str(c["tid"]), []).append(c)
        assert len(by_thread) == THREADS
        for made in by_thread.values():
            assert [int(c["ts_ns"]) for c in made] == sorted(int(c["ts_ns"]) for c in made)
            assert [c["event"] for c in made] == ["cudaMalloc", "cudaFree"] * PAIRS
        outs[workers] = sorted(
            (c["event"], c["ret"], c["ret_name"], c["args"] if fmt == "csv"
             else json.dumps(c["args"]), c["details"], c["depth"]) for c in calls)
    assert outs["2"] == outs["0"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "chrome"])
def test_a_launch_loop_s_backlog_made_into_rows_from_its_bytes_is_whole_and_in_order(
        tmp_path, libcudart, fmt):
    """Launches alone (records of one length, each call at the top) with two
    children making the backlog's rows: the session's thread gives them their
    batches still bytes (ringbuf.Strided), reading only pids and kernels (and,
    for Chrome, the threads, times and durations its tracks depend on). Every
    iteration's launch once, in order (its grid carries the iteration), every
    row as the thread alone writes it but for the times and pointers."""
    exe = build_loop("shared")
    outs = {}
    for workers in ("0", "2"):
        out = tmp_path / f"launches-{workers}.{fmt}"
        quiet, kept = os.pipe()  # its stdin: open, silent (input or EOF ends the loop)
        proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaLaunchKernel",
                             "-f", fmt, "-o", str(out), "--ringbuf-pages", RING_PAGES, "--",
                             str(exe), "0", str(LAUNCHES), timeout=HANG_S,
                             env={**os.environ, "CUDAPROBE_DECODE_WORKERS": workers},
                             stdin=quiet)
        os.close(quiet)
        os.close(kept)
        assert proc.returncode == 0, proc.stderr
        calls = made_calls(out, fmt)
        args = [json.loads(c["args"]) if fmt == "csv" else c["args"] for c in calls]
        assert [a["gridDim"][0] for a in args] == list(range(1, LAUNCHES + 1))
        assert [int(c["ts_ns"]) for c in calls] == sorted(int(c["ts_ns"]) for c in calls)
        outs[workers] = [(c["event"], c["ret"], c["ret_name"], POINTER.sub("P", json.dumps(a)),
                          POINTER.sub("P", c["details"])) for c, a in zip(calls, args)]
    assert outs["2"] == outs["0"]
