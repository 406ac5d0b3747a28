"""--py-stacks on every CPython this machine has: the workload (pystack_workload.py)
calls libcudart through ctypes from nested functions, a generator, a
coroutine, a thread, a lambda, a comprehension and a recursion deeper than
the probe walks, and prints the stack the interpreter itself gives each call;
each row's py_stack must equal it, frame by frame (file, line, function).
Launched (-- COMMAND), one trace for each; and attached, all in one trace
(--pid for each: each workload waits on a FIFO that the test writes once
cudaprobe says it is attached)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import HANG_S, cudaprobe_cmd, unique_name
from .conftest import expected_calls, trace_jsonl
from .pythons import PYTHONS
from .running import Tracing, started

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

WORKLOAD = Path(__file__).resolve().parent / "pystack_workload.py"
EVENTS = ("-e", "cudaRuntimeGetVersion,cudaDriverGetVersion")
MAX_FRAMES = 32


def check_stacks(rows: list[dict], expected: list[dict]) -> None:
    """Row by row on each thread, in order: the stack the interpreter gave."""
    assert len(rows) == len(expected) == 9
    by_tid: dict[int, list[dict]] = {}
    for row in rows:
        by_tid.setdefault(row["tid"], []).append(row)
    want_by_tid: dict[int, list[dict]] = {}
    for e in expected:
        want_by_tid.setdefault(e["tid"], []).append(e)
    assert sorted(map(len, by_tid.values())) == sorted(map(len, want_by_tid.values()))
    for tid, wants in want_by_tid.items():
        for row, want in zip(by_tid[tid], wants):
            assert row["event"] == want["event"]
            frames = [{"file": f, "line": line, "function": fn} for f, line, fn in want["stack"]]
            assert row["py_stack"] == frames[:MAX_FRAMES], (row["py_stack"], frames)
            assert row.get("py_stack_cut", False) == (len(frames) > MAX_FRAMES)


@pytest.mark.parametrize("python", PYTHONS)
def test_launched(tmp_path, libcudart, python):
    rows, summary, proc = trace_jsonl(tmp_path, "--py-stacks", *EVENTS, "--lib", str(libcudart),
                                      command=[python, str(WORKLOAD), str(libcudart)])
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    check_stacks(rows, expected_calls(proc.stdout))


def test_attached_with_pid_to_every_version_at_once(tmp_path, libcudart):
    """One trace, --pid given once for a process of each CPython: each
    process's stacks are read with its own interpreter's layout."""
    if not PYTHONS:  # a trace with no --pid would follow every process, not these
        pytest.skip("no CPython 3.9-3.13 on this machine")
    workloads = {}
    for python in PYTHONS:
        fifo = tmp_path / f"go{len(workloads)}"
        os.mkfifo(fifo)
        workload = started(subprocess.Popen([python, str(WORKLOAD), str(libcudart), "--wait",
                                             str(fifo)], stdout=subprocess.PIPE, text=True))
        assert workload.stdout.readline().strip() == "ready"
        workloads[python] = (workload, fifo)
    pids = [a for w, _ in workloads.values() for a in ("--pid", str(w.pid))]
    tracing = Tracing(tmp_path, "--py-stacks", *EVENTS, *pids)
    tracing.wait_for("attached to")
    for _, fifo in workloads.values():
        with open(fifo, "w") as go:
            go.write("go\n")
    printed = {python: w.stdout.read() for python, (w, _) in workloads.items()}
    assert [w.wait(timeout=HANG_S) for w, _ in workloads.values()] == [0] * len(workloads)
    rows, summary, _err = tracing.finish()
    assert summary["lost_total"] == 0
    wrong = []
    for python, (workload, _) in workloads.items():
        try:
            check_stacks([r for r in rows if r["pid"] == workload.pid],
                         [json.loads(line) for line in printed[python].splitlines()
                          if line.startswith("{")])
        except AssertionError as e:
            wrong.append(f"{python}: {e}")
    assert not wrong, "\n".join(wrong)


def test_a_descendant_running_an_interpreter_found_nowhere_else_has_its_stacks(tmp_path,
                                                                             libcudart):
    """-- sh -c 'PYTHON workload', with a PATH that has no such Python: the
    interpreter is read from the child's own maps while it is held at its
    open of libcudart, before its first call."""
    others = [p for p in PYTHONS if not p.startswith("/usr/bin/")]
    if not others:
        pytest.skip("no CPython outside /usr/bin on this machine")
    python = others[-1]
    rows, summary, proc = trace_jsonl(
        tmp_path, "--py-stacks", *EVENTS, "--lib", str(libcudart),
        command=["sh", "-c", f"{python} {WORKLOAD} {libcudart}; true"],
        env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    check_stacks(rows, expected_calls(proc.stdout))


def test_pid_children_forked_and_spawned_have_their_stacks(tmp_path, libcudart):
    """--py-stacks --pid on a Python process that then forks a child (no exec)
    and starts another with subprocess (an exec of the same interpreter): both
    are traced from their first call, each row with the stack its own
    interpreter gave."""
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    family = started(subprocess.Popen(
        [sys.executable, str(WORKLOAD.with_name("pystack_family.py")), str(libcudart),
         str(fifo)], stdout=subprocess.PIPE, text=True))
    assert family.stdout.readline().strip() == "ready"
    tracing = Tracing(tmp_path, "--py-stacks", *EVENTS, "--lib", str(libcudart), "--pid",
                      str(family.pid), "--wait")
    tracing.wait_for("attached to")
    with open(fifo, "w") as go:
        go.write("go\n")
    printed = [json.loads(line) for line in family.stdout.read().splitlines()
               if line.startswith("{")]
    assert family.wait(timeout=HANG_S) == 0
    rows, summary, _err = tracing.finish()
    assert summary["lost_total"] == 0 and summary["untraced"][1:] == []
    children = sorted({r["pid"] for r in rows})
    assert len(children) == 2 and family.pid not in children
    for child in children:
        mine = [r for r in rows if r["pid"] == child]
        tids = {r["tid"] for r in mine}
        check_stacks(mine, [e for e in printed if e["tid"] in tids])


STRESS = """
import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
def work():
    v = ctypes.c_int()
    for _ in range(3000):
        lib.cudaRuntimeGetVersion(ctypes.byref(v))  # line 7
threads = [threading.Thread(target=work) for _ in range(3)]
for t in threads: t.start()
work()
for t in threads: t.join()
"""


def test_every_call_of_busy_threads_has_its_stack(tmp_path, libcudart):
    """Four threads calling as fast as they can: a batch of the ring holds
    thousands of stacks before their calls are decoded; none is dropped."""
    script = tmp_path / "busy.py"
    script.write_text(STRESS)
    rows, summary, proc = trace_jsonl(tmp_path, "--py-stacks", "-e", "cudaRuntimeGetVersion",
                                      "--lib", str(libcudart),
                                      command=[PYTHONS[-1], str(script), str(libcudart)])
    assert proc.returncode == 0 and summary["lost_total"] == 0, proc.stderr
    assert len(rows) == 12000 and len({r["tid"] for r in rows}) == 4
    assert all(r["py_stack"][0] == {"file": str(script), "line": 7, "function": "work"}
               for r in rows)


LEAKER = """
import ctypes, sys
rt = ctypes.CDLL(sys.argv[1])
def alloc(n):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # line 6
    return p
def leak():
    return alloc(1 << 20)  # line 9
kept = alloc(4096)  # line 10
leaked = leak()
rt.cudaFree(kept)
"""


def test_memory_names_the_python_line_of_each_leak(tmp_path):
    """memory --py-stacks: a leak's call site, and the peak's, begins with the
    program's own line that allocated (here the helper's, line 6)."""
    from .memstub import build_memstub, stub_env  # noqa: PLC0415

    script = tmp_path / "leaker.py"
    script.write_text(LEAKER)
    cudart = str(build_memstub() / "libcudart.so.13")
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        cudaprobe_cmd("memory", "--py-stacks", "--lib", cudart, "-o", str(out), "--",
                      PYTHONS[-1], str(script), cudart),
        capture_output=True, text=True, timeout=120, env=stub_env())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    leaks = [g for p in report["processes"] for g in p["leaks"]]
    assert len(leaks) == 1, leaks
    assert leaks[0]["site"][0] == f"{script}:6 (alloc)", leaks
    [peak] = report["processes"][0]["peak_by_site"]  # both allocations live, one line
    assert peak == {"site": leaks[0]["site"], "bytes": (1 << 20) + 4096}


def test_comm_execs_with_their_stacks(tmp_path, libcudart, monkeypatch):
    """--comm and --py-stacks together (both act at exec): an interpreter
    exec'd under the name after the start is traced from its first call after
    its own probes are in (said on stderr), each row with the stack the
    interpreter gave."""
    named = tmp_path / unique_name("cpy")  # a suite beside this one runs its own
    named.symlink_to(PYTHONS[-1])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    tracing = Tracing(tmp_path, "--py-stacks", "--comm", named.name, *EVENTS,
                      "--lib", str(libcudart))
    tracing.wait_for("following every process named")
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    workload = started(subprocess.Popen([str(named), str(WORKLOAD), str(libcudart), "--wait",
                                         str(fifo)], stdout=subprocess.PIPE, text=True))
    assert workload.stdout.readline().strip() == "ready"
    tracing.wait_for(f"pid {workload.pid} ({named.name}) started under the name")
    with open(fifo, "w") as go:
        go.write("go\n")
    printed = workload.stdout.read()
    assert workload.wait(timeout=HANG_S) == 0
    rows, summary, _err = tracing.interrupt()
    assert summary["lost_total"] == 0
    assert {row["pid"] for row in rows} == {workload.pid}
    check_stacks(rows, expected_calls(printed))


def test_on_a_node_each_process_has_its_stacks_from_its_first_call_decoded(tmp_path):
    """No --pid, --comm or command (a node's trace, as serve runs): a Python
    process is found by its first call, its interpreter read from its maps
    then (on a thread beside the decoder's). Every call it makes once a row of
    it with a stack is out has its stack. A private copy of the stand-in
    runtime keeps other tests' processes out."""
    python = Path("/usr/bin/python3.11")
    if not python.exists():
        pytest.skip("no /usr/bin/python3.11")
    from .test_gputime import GPULINES, fake_gpu, launch_line  # noqa: PLC0415
    lib = tmp_path / "libcudart.so.13"
    lib.write_bytes(fake_gpu()[1].read_bytes())
    tracing = Tracing(tmp_path, "--py-stacks", "--lib", str(lib), "-e", "cudaLaunchKernel")
    # heavy() until told: its probes go in at some point, then it is found by a row
    workload = started(subprocess.Popen(
        [str(python), str(GPULINES), str(lib), "50", "20", "wait"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_GPUTIME_DIR": str(tmp_path)}))
    deadline = time.monotonic() + HANG_S
    while not (tracing.output.exists()
               and any(f'"pid":{workload.pid},' in row and '"py_stack":' in row
                       for row in tracing.output.read_text().splitlines())):
        assert time.monotonic() < deadline and workload.poll() is None, "no row with a stack"
        time.sleep(0.05)
    workload.communicate("go\n", timeout=HANG_S)  # the 50 heavy() and 20 light() after it
    assert workload.returncode == 0
    rows, summary, _err = tracing.interrupt()
    assert summary["lost_total"] == 0
    mine = [r for r in rows if r["pid"] == workload.pid]
    lines = [f"{r['py_stack'][0]['file']}:{r['py_stack'][0]['line']} "
             f"({r['py_stack'][0]['function']})" if "py_stack" in r else None
             for r in mine[-70:]]
    assert lines == [launch_line("heavy")] * 50 + [launch_line("light")] * 20
