"""Borrowed stacks (--py-stacks), on every CPython this machine has: CUDA calls
made by threads that run no Python (borrowed_pool.c, loaded with ctypes by
borrowed_workload.py) while a Python thread waits for them in a C call carry
that thread's stack, marked borrowed with its tid and why it was chosen:

- a thread made by a ctypes call and joined: every one of its calls on the
  caller's line, lent by the caller, which handed it the work (made it);
- autograd's shape: a device thread with a Python thread state but no frame,
  woken with work by backward() (a C call) that waits for it;
- the main thread the only one waiting in a C call, the native thread made
  and woken by none of the Python threads: lent all the same, as the only
  one (its tid not known on 3.9 and 3.10, whose thread states name a thread
  by pthread_self);
- two Python threads (and the main one) waiting in C calls while a native
  thread, made and woken by none of them, calls: no stack, and the row says
  why;
- no Python thread waiting (the main one runs Python): no stack at all.

And `stats --by line` and `memory --py-stacks` count lent calls on the
lender's line.

One trace per CPython, shared by its tests; each row compared with the stack
the interpreter itself printed for the waiting call."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cudaprobe.analysis.by_line import NO_LENDER
from cudaprobe.decode.pystacks import HANDED, LENDERS_MANY, ONLY

from ..conftest import build_workload
from .conftest import run_cudaprobe, trace_jsonl
from .memstub import build_memstub
from .pythons import PYTHONS

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

WORKLOAD = Path(__file__).resolve().parent / "borrowed_workload.py"
EVENTS = ("-e", "cudaRuntimeGetVersion,cudaDriverGetVersion")
CALLS = 20  # each case's, by its thread with no Python frame


@pytest.fixture(scope="module")
def borrowed_pool(libcudart) -> Path:
    return build_workload("borrowed_pool.c", "libborrowed_pool.so", extra=["-shared", "-fPIC"])


@pytest.fixture(scope="module", params=PYTHONS)
def traced(request, tmp_path_factory, libcudart, borrowed_pool):
    """(rows by tid, the cases the workload printed by name, stderr) of one trace."""
    tmp = tmp_path_factory.mktemp("borrowed")
    rows, summary, proc = trace_jsonl(
        tmp, "--py-stacks", *EVENTS, "--lib", str(libcudart),
        command=[request.param, str(WORKLOAD), str(borrowed_pool), str(libcudart), str(CALLS)])
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    by_tid: dict[int, list[dict]] = {}
    for row in rows:
        by_tid.setdefault(row["tid"], []).append(row)
    cases = {c["case"]: c for c in map(json.loads, proc.stdout.splitlines())}
    assert set(cases) == {"worker", "pool", "only", "several", "none"}, proc.stdout
    return by_tid, cases, proc.stderr, request.param


def version_of(python: str) -> tuple[int, int]:
    major, minor = python.rsplit("python", 1)[1].split(".")
    return int(major), int(minor)


def frames(case: dict) -> list[dict]:
    return [{"file": f, "line": line, "function": fn} for f, line, fn in case["stack"]]


def check_lent(rows: list[dict], case: dict, borrowed: dict | None = None) -> None:
    """Every call of the case's thread: the waiting caller's stack, lent by it,
    which handed the work over (or as `borrowed` says)."""
    assert [r["event"] for r in rows] == ["cudaDriverGetVersion"] * CALLS
    assert case["tid"] != case["caller"]
    for row in rows:
        assert row["py_stack"] == frames(case), row
        assert row["py_stack_borrowed"] == (borrowed or {"tid": case["caller"],
                                                         "because": HANDED}), row
        assert "py_stack_missing" not in row


def test_a_thread_made_by_a_ctypes_call_borrows_its_callers_stack(traced):
    by_tid, cases, _, _ = traced
    check_lent(by_tid.get(cases["worker"]["tid"], []), cases["worker"])


def test_a_device_thread_with_no_frame_borrows_the_stack_of_backward(traced):
    by_tid, cases, _, _ = traced
    check_lent(by_tid.get(cases["pool"]["tid"], []), cases["pool"])


def test_the_only_python_thread_waiting_lends_its_stack_though_it_did_not_wake_the_thread(
        traced):
    by_tid, cases, _, python = traced
    case = cases["only"]
    named = version_of(python) >= (3, 11)  # 3.9, 3.10: a thread state has no tid
    check_lent(by_tid.get(case["tid"], []), case,
               {"tid": case["caller"] if named else None, "because": ONLY})


def test_several_waiting_and_none_handing_over_gives_no_stack_and_says_why(traced):
    by_tid, cases, stderr, _ = traced
    rows = by_tid.get(cases["several"]["tid"], [])
    assert len(rows) == CALLS
    for row in rows:
        assert "py_stack" not in row and "py_stack_borrowed" not in row, row
        assert row["py_stack_missing"] == LENDERS_MANY, row
    assert f"{CALLS} calls without their Python stack: {LENDERS_MANY}" in stderr


def test_no_python_thread_waiting_gives_no_stack(traced):
    by_tid, cases, _, _ = traced
    rows = by_tid.get(cases["none"]["tid"], [])
    assert len(rows) == CALLS
    assert all(not any(k.startswith("py_stack") for k in row) for row in rows), rows[0]


def test_the_python_threads_own_calls_are_not_borrowed(traced):
    by_tid, cases, stderr, _ = traced
    own = by_tid[cases["worker"]["caller"]]
    assert [r["event"] for r in own] == ["cudaRuntimeGetVersion"]
    assert own[0]["py_stack"] and "py_stack_borrowed" not in own[0]
    assert f"--py-stacks: {3 * CALLS} calls of threads with no Python frame" in stderr


def test_stats_by_line_counts_the_lent_calls_on_the_callers_line(tmp_path, libcudart,
                                                                 borrowed_pool):
    """stats --by line: the worker's and the device thread's calls are counted on
    the line of the Python call that waited for them; the others' rows as said."""
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--by", "line", "--json", "-o", str(out), *EVENTS, "--lib",
                         str(libcudart), "--", PYTHONS[-1], str(WORKLOAD), str(borrowed_pool),
                         str(libcudart), str(CALLS))
    assert proc.returncode == 0, proc.stderr
    cases = {c["case"]: c for c in map(json.loads, (line for line in proc.stdout.splitlines()
                                                    if line.startswith('{"case"')))}
    rows = {r["event"]: r["count"] for r in json.loads(out.read_text())["functions"]}
    file, line, function = cases["worker"]["stack"][0]
    assert rows.pop(f"{file}:{line} ({function})") == 3 * CALLS  # worker, pool, only: one line
    assert rows.pop(NO_LENDER) == CALLS
    assert rows.pop("(no Python frame)") == CALLS
    assert sum(rows.values()) == 1, rows  # the main thread's first call


LEAKER = """
import ctypes, sys
pool, rt = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
def load_weights():
    malloc = ctypes.cast(rt.cudaMalloc, ctypes.c_void_p)
    pool.worker_allocs(malloc, 3, ctypes.c_size_t(1 << 20))  # line 6
load_weights()
"""


def test_memory_names_the_line_that_waited_for_a_threads_allocations(tmp_path, borrowed_pool):
    """memory --py-stacks: allocations made by a thread of a C library that a
    Python call handed them to are grouped and named by that call's line."""
    script = tmp_path / "leaker.py"
    script.write_text(LEAKER)
    cudart = str(build_memstub() / "libcudart.so.13")
    out = tmp_path / "memory.json"
    proc = run_cudaprobe("memory", "--py-stacks", "--lib", cudart, "-o", str(out), "--",
                         PYTHONS[-1], str(script), str(borrowed_pool), cudart)
    assert proc.returncode == 0, proc.stderr
    leaks = [g for p in json.loads(out.read_text())["processes"] for g in p["leaks"]]
    assert len(leaks) == 1, leaks
    assert leaks[0]["site"][0] == f"{script}:6 (load_weights)", leaks
    assert leaks[0]["count"] == 3, leaks


def test_the_older_kernels_program_lends_too(tmp_path, libcudart, borrowed_pool):
    """As on a kernel without may_goto (CUDAPROBE_MAY_GOTO=0, CPython 3.12+: its
    code objects are told apart without a hash): the program loads, and the
    worker's calls carry the caller's stack."""
    python = next((p for p in PYTHONS if version_of(p) >= (3, 12)), None)
    if python is None:
        pytest.skip("no CPython 3.12 or later on this machine")
    rows, summary, proc = trace_jsonl(
        tmp_path, "--py-stacks", *EVENTS, "--lib", str(libcudart),
        command=[python, str(WORKLOAD), str(borrowed_pool), str(libcudart), str(CALLS)],
        env={**os.environ, "CUDAPROBE_MAY_GOTO": "0"})
    assert proc.returncode == 0, proc.stderr
    cases = {c["case"]: c for c in map(json.loads, proc.stdout.splitlines())}
    check_lent([r for r in rows if r["tid"] == cases["worker"]["tid"]], cases["worker"])
