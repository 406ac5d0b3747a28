"""`trace -- COMMAND` follows the command's descendants to the last exit, as
`strace -f` does, and every way a trace ends is said and gives the exit
status --help documents for it.

The workloads hold on events, not on time: family's children start calling
once their parent has exited (EOF on a pipe it held), and a background
steady_calls runs until the test signals it. These tests probe in perf mode
(one perf event per probe, the BPF filter deciding): there a child is traced
from its fork, while uprobe_multi's per-process links reach a new child at the
next poll after it (docs/attach.md), which a child calling at once could beat.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .conftest import run_cudaprobe
from .running import Tracing

PERF = dict(os.environ, CUDAPROBE_ATTACH="perf")
STEADY_EVENTS = "cudaGetDeviceCount,cudaMalloc,cudaFree"


def _rows(path: Path) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines and "summary" in lines[-1]
    return lines[:-1], lines[-1]["summary"]


def test_children_that_outlive_the_command_and_grandchildren_are_traced(tmp_path, libcudart):
    exe = build_workload("family.c")
    out = tmp_path / "calls.jsonl"
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc", "-o", str(out),
                         "--", str(exe), "2", "2", "10", "5", env=PERF)
    assert proc.returncode == 5, proc.stderr  # the command's own status
    said = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert len(said) == 1 + 2 + 4  # the command, 2 children, 2 grandchildren each
    rows, summary = _rows(out)
    by_pid = Counter(r["pid"] for r in rows)
    assert by_pid == {p["pid"]: p["calls"] for p in said}, (summary, proc.stderr)
    first = {r["pid"]: r["args"]["size"] for r in reversed(rows)}
    assert first == {p["pid"]: p["size"] for p in said}
    assert summary["calls"] == len(rows) == 1 + 6 * 10 and summary["lost_total"] == 0
    # whether cudaprobe saw its descendants run on depends on who ran first: the
    # background test below holds one to see it said
    assert re.search(r"family exited \(status 5\)", proc.stderr)


def test_every_fork_without_exec_is_traced_or_said(tmp_path, libcudart):
    """The default links per process do not follow a fork: a child that shares
    its parent's libcudart (family.c: the parent calls, forks, exits at once;
    each child calls at once then) is linked at its making, its calls after
    that traced; those before, or a child gone before its links were in, are
    said, each by its pid. Whichever comes first, no child is left unsaid."""
    exe = build_workload("family.c")
    out = tmp_path / "calls.jsonl"
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc", "-o", str(out),
                         "--", str(exe), "4", "1", "3", "0")
    assert proc.returncode == 0, proc.stderr
    said = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert len(said) == 1 + 4 + 4  # the command, 4 children, a grandchild each
    rows, summary = _rows(out)
    by_pid = Counter(r["pid"] for r in rows)
    untraced = {u["pid"]: u for u in summary["untraced"]}
    for p in said[1:]:
        assert by_pid[p["pid"]] == p["calls"] or p["pid"] in untraced, (p, proc.stderr)
    for u in untraced.values():
        assert u["before"] in ("the attach", "its probes"), u
        if u["before"] == "its probes":  # gone before its links: whose child it was
            assert u["parent"] in {p["pid"] for p in said}, u
    assert summary["lost_total"] == 0 and by_pid[said[0]["pid"]] == 1


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen | None,
              timeout: float = HANG_S) -> re.Match:
    """Until `pattern` is in the file (cudaprobe's stderr, or the output of a
    workload the shell started in the background, which may not be made yet),
    failing if `proc` exits first."""
    def text() -> str:  # a file a shell's redirection makes may not be made yet
        return path.read_text() if path.exists() else ""

    deadline = time.monotonic() + timeout
    while not (found := re.search(pattern, text())):
        assert proc is None or proc.poll() is None, text()
        assert time.monotonic() < deadline, text()
        time.sleep(0.02)
    return found


def marked(env: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """`env` with a mark of its own, which the processes started with it and
    their descendants carry: what _kill_workloads finds them by."""
    mark = secrets.token_hex(8)
    return {**(env or os.environ), "CUDAPROBE_TEST_MARK": mark}, mark


def _kill_workloads(mark: str, *pids: int) -> None:
    """SIGKILL what a failed test left running: `pids`, and the processes whose
    environment carries `mark` (never another test's, running beside it)."""
    needle = f"CUDAPROBE_TEST_MARK={mark}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids += (int(entry.name),)
            except OSError:
                continue
    for pid in pids:
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Background:
    """`cudaprobe trace ARGS -- sh -c 'steady_calls 0 1000 0 & exit 4'`: the
    command exits at once, its child calls until the test stops it."""

    def __init__(self, tmp: Path, libcudart: Path, *args: str) -> None:
        steady = build_workload("steady_calls.c")
        self.out, self.err = tmp / "calls.jsonl", tmp / "stderr.txt"
        self.steady_out = tmp / "steady.txt"
        script = f"'{steady}' 0 1000 0 > '{self.steady_out}' & exit 4"
        env, self.mark = marked(PERF)
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", STEADY_EVENTS, *args,
                              "-o", str(self.out), "--", "sh", "-c", script),
                stdout=subprocess.DEVNULL, stderr=err, env=env)
        self.child = 0

    def wait_running_on(self) -> int:
        found = _wait_for(self.err, r"sh exited \(status 4\); 1 of its descendants runs on "
                                    r"\(pid (\d+)\)", self.proc)
        self.child = int(found.group(1))
        return self.child

    def stop_child(self) -> None:
        """SIGTERM, once the child has its handler (it prints its arguments
        after setting it): before, the signal would kill it unsaid."""
        _wait_for(self.steady_out, r"argv\[0\]=", None)
        os.kill(self.child, signal.SIGTERM)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _kill_workloads(self.mark, self.child)


@pytest.fixture
def background(tmp_path, libcudart):
    made: list[Background] = []

    def start(*args: str) -> Background:
        made.append(Background(tmp_path, libcudart, *args))
        return made[-1]

    yield start
    for b in made:
        b.close()


def test_a_background_child_is_traced_until_it_exits(background):
    """`sh -c 'loop & exit 0'`: the trace waits for the loop, and has all of its
    calls; the exit status is sh's."""
    b = background()
    b.wait_running_on()
    b.stop_child()
    assert b.proc.wait(HANG_S) == 4, b.err.read_text()
    loops = int(b.steady_out.read_text().rsplit("loops=", 1)[1])
    rows, summary = _rows(b.out)
    assert len([r for r in rows if r["pid"] == b.child]) == 3 * loops
    assert summary["calls"] == len(rows) and summary["lost_total"] == 0
    assert "sh exited (status 4), and the last of its descendants after it" in b.err.read_text()


def test_a_signal_while_descendants_run_is_said_and_exits_128_plus_n(background):
    b = background()
    child = b.wait_running_on()
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(HANG_S) == 128 + signal.SIGTERM, b.err.read_text()
    assert (f"stopped by SIGTERM: sh has exited (status 4), 1 of its descendants keeps "
            f"running (pid {child}), no longer traced") in b.err.read_text()
    assert os.path.exists(f"/proc/{child}")  # never signalled by cudaprobe
    _rows(b.out)


def test_duration_over_while_the_command_runs_exits_124_whenever_it_exits(tmp_path,
                                                                          libcudart):
    """The status is decided when --duration stops the trace: a command that
    exits after (during the drain) does not make it its own."""
    steady = build_workload("steady_calls.c")
    err = tmp_path / "stderr.txt"
    env, mark = marked()
    with open(err, "w") as f:
        proc = subprocess.Popen(
            cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", STEADY_EVENTS, "-d", "0.5",
                          "-o", str(tmp_path / "calls.jsonl"), "--", str(steady), "0", "1000",
                          "0"), stdout=subprocess.DEVNULL, stderr=f, env=env)
    workload = 0
    try:
        found = _wait_for(err, r"--duration is over: \S*steady_calls \(pid (\d+)\) keeps "
                               "running", None)
        workload = int(found.group(1))
        os.kill(workload, signal.SIGTERM)  # it exits now (0), while cudaprobe drains
        assert proc.wait(HANG_S) == 124, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_workloads(mark, workload)


# steady_calls' iterations (3 calls each): many decode batches (ringbuf.BATCH_BYTES)
ITERATIONS = 40_000


def test_ctrl_c_during_the_drain_cuts_it_short_and_counts_the_rest(tmp_path, libcudart):
    """The rows go to a pipe that the test does not read until the workload
    has said it finished: cudaprobe's decoder waits on the full pipe a few
    rows in, while its reader spools every record. The test then reads only
    while cudaprobe has not said that the command exited, which it says a
    decode batch later, far from the end, whatever the machine's speed: the
    drain begins, and a SIGINT stops it. The summary counts what was left as
    lost (`undecoded`), every call is in the rows or in that count, and the
    status is 128+2. (A stop signal ends the trace: then it takes a second one
    to cut the drain; the unit tests of StopRequest check that count.)"""
    steady = build_workload("steady_calls.c")
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen(
            cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", STEADY_EVENTS, "-f", "jsonl",
                          "-o", "-", "--", "sh", "-c",
                          f"exec '{steady}' {ITERATIONS} 0 0 >/dev/null"),
            stdout=subprocess.PIPE, stderr=f)
    chunks = []
    _wait_for(err, "steady_calls: finished", proc)
    try:
        while "sh exited (status 0)" not in err.read_text():
            assert proc.poll() is None, err.read_text()
            if select.select([proc.stdout], [], [], 0.05)[0]:
                chunks.append(os.read(proc.stdout.fileno(), 1 << 16))
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT, err.read_text()
    lines = [json.loads(line) for line in (b"".join(chunks) + out).splitlines()]
    summary = lines[-1]["summary"]
    undecoded = summary["lost"]["undecoded"]
    assert undecoded > 0 and summary["calls"] == 3 * ITERATIONS
    assert len(lines) - 1 + undecoded == summary["calls"] == summary["rows"] + undecoded
    assert re.search(rf"SIGINT during the drain: stopped it, {undecoded} records left "
                     r"undecoded \(counted as lost: undecoded\)", err.read_text())


def _each_exact(out: Path, err: str) -> tuple[list[dict], dict, dict]:
    """(what each process said, the summary, each process's rows by pid)."""
    said = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    rows, summary = _rows(out)
    return said, summary, Counter(r["pid"] for r in rows)


def test_a_child_forked_without_exec_is_held_until_its_links_are_in(tmp_path, libcudart):
    """fork_calls' children call cudaMalloc as the first thing after fork()
    returns, from the main thread and from a second one, and each forks a
    grandchild that does the same. Each is held as fork returns in it (a
    ptrace stop, told to cudaprobe alone) until its links are in: every call
    of every process is traced, from its first (with the holds off, 7 of 49
    calls were), and the tree
    cannot tell: every wait status is its child's own exit (waits ask for
    stops too), no SIGCHLD but for exits. One child at a time ("seq"), and a
    bound long enough for any load: a child is seized as soon as cudaprobe's
    seizer runs."""
    exe = build_workload("fork_calls.c")
    out = tmp_path / "calls.jsonl"
    env = dict(os.environ, CUDAPROBE_FORK_HOLD_MS="2000")
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc", "-o", str(out),
                         "--", str(exe), "8", "3", "seq", env=env)
    assert proc.returncode == 0, proc.stderr  # statuses as made, no stop, no other SIGCHLD
    said, summary, by_pid = _each_exact(out, proc.stderr)
    assert len(said) == 1 + 8 + 8
    assert {p["pid"]: p["calls"] for p in said} == dict(by_pid), proc.stderr
    first = {r["pid"]: r["args"]["size"] for r in reversed(_rows(out)[0])}
    assert first == {p["pid"]: p["size"] for p in said}  # from each one's first call
    # (under heavy load a child may be said to have run unlinked for a moment
    # when it did not: cudaprobe says so whenever it cannot be sure)
    assert summary["lost_total"] == 0 and summary["processes_traced"] == 17


def _tracer(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("TracerPid:")).split()[1])


def test_a_debugger_attaches_to_a_held_child_once_it_runs(tmp_path, libcudart):
    """A child held in its fork is let go as its links are in, before it runs
    its own code: by its first line no tracer is left on it (TracerPid 0), and
    a debugger attaches to it as without cudaprobe (strace -p), sees it fork
    its grandchild (held and traced in its turn) and exit with its own status;
    every call of the three processes is traced, and the tree's statuses are
    their own."""
    gate, out, seen = tmp_path / "gate", tmp_path / "calls.jsonl", tmp_path / "strace.txt"
    os.mkfifo(gate)
    proc, status, printed, mark = _trace_fork_calls(
        tmp_path, libcudart, 1, 3,
        dict(os.environ, CUDAPROBE_FORK_HOLD_MS="2000", FORK_CALLS_GATE=str(gate)))
    strace = None
    try:
        child = int(_wait_for(printed, r'"pid":(\d+),"size":1001', proc).group(1))
        assert _tracer(child) == 0  # let go: it waits at the gate on its own
        strace = subprocess.Popen(["strace", "-p", str(child), "-o", str(seen), "-e",
                                   "trace=clone,clone3,fork,wait4,exit_group"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + HANG_S
        while _tracer(child) != strace.pid:
            assert strace.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        with open(gate, "wb") as f:  # on it goes, the debugger on it
            f.write(b"x")
        assert strace.wait(timeout=HANG_S) == 0
        assert "+++ exited with 1 +++" in seen.read_text(), seen.read_text()
        assert proc.wait(timeout=HANG_S) == 0
        err = proc.stderr.read().decode()
        assert status.read_text().strip() == "0"  # statuses their own, no stop seen
        said, summary, by_pid = _each_exact(out, printed.read_text())
        assert len(said) == 3 and child in by_pid
        assert {p["pid"]: p["calls"] for p in said} == dict(by_pid), err
        assert summary["lost_total"] == 0 and summary["processes_traced"] == 4  # sh too
    finally:
        _kill_workloads(mark, proc.pid, strace.pid if strace else 0)


def test_children_a_pid_target_forks_after_the_attach_are_held(tmp_path, libcudart,
                                                              monkeypatch):
    """`--pid P` attached to fork_calls after its first call; then it forks four
    children one at a time (two from a second thread), each calling at once
    and forking a grandchild that does the same: each is held in its fork
    until its links are in, so every call of the eight is traced from its
    first; P's call before the attach is not, and is said; P's status is its
    own (no stop seen, no SIGCHLD but for exits)."""
    exe = build_workload("fork_calls.c")
    start, printed = tmp_path / "start", tmp_path / "printed"
    os.mkfifo(start)
    monkeypatch.setenv("CUDAPROBE_FORK_HOLD_MS", "2000")  # seized in time under any load
    env, mark = marked(dict(os.environ, FORK_CALLS_START=str(start)))
    with open(printed, "wb") as err:
        app = subprocess.Popen([str(exe), "4", "3", "seq"], stdout=subprocess.DEVNULL,
                               stderr=err, env=env)
    tracing = None
    try:
        _wait_for(printed, r'"size":1,', app)  # its first call made: now at the FIFO
        tracing = Tracing(tmp_path, "--lib", str(libcudart), "-e", "cudaMalloc",
                          "--pid", str(app.pid))
        tracing.wait_for("attached to")
        with open(start, "wb") as f:
            f.write(b"x")
        assert app.wait(timeout=HANG_S) == 0  # statuses their own, no stop seen
        rows, summary, err = tracing.finish()
        said = [json.loads(t) for t in printed.read_text().splitlines() if t.startswith("{")]
        assert len(said) == 1 + 4 + 4
        by_pid = Counter(r["pid"] for r in rows)
        assert {p["pid"]: p["calls"] for p in said[1:]} == dict(by_pid), err
        first = {r["pid"]: r["args"]["size"] for r in reversed(rows)}
        assert first == {p["pid"]: p["size"] for p in said[1:]}  # from each one's first
        assert [u["pid"] for u in summary["untraced"]] == [app.pid], (summary["untraced"], err)
        assert summary["lost_total"] == 0
    finally:
        _kill_workloads(mark, app.pid, tracing.proc.pid if tracing else 0)


def test_a_child_whose_wait_outlasts_its_hold_is_said(tmp_path, libcudart):
    """cudaprobe and its seizer stopped (SIGSTOP: no handler lets the children
    go) as fork_calls forks a child: the child waits in its fork for as long as
    the hold's wait can spin (under the 2 s bound asked for here), then goes on
    by itself: its calls made, it waits at a FIFO, alive. cudaprobe goes on and
    seizes it then: it must not take it for held (its key no longer says it
    waits), so it is said, with its span, not counted as traced from its first
    call; its grandchild, forked once cudaprobe runs again, is held and whole."""
    start, gate, out = tmp_path / "start", tmp_path / "gate", tmp_path / "calls.jsonl"
    os.mkfifo(start)
    os.mkfifo(gate)
    proc, status, printed, mark = _trace_fork_calls(
        tmp_path, libcudart, 1, 3, dict(os.environ, CUDAPROBE_FORK_HOLD_MS="2000",
                                        FORK_CALLS_START=str(start), FORK_CALLS_GATE=str(gate)))
    try:
        _wait_for(printed, r'"size":1,', proc)  # at the start FIFO, linked
        stopped = [proc.pid, *_children_named(proc.pid, "cudaprobe-seize")]
        assert len(stopped) == 2
        deadline = time.monotonic() + HANG_S
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
            while _state(pid) != b"T":
                assert time.monotonic() < deadline
                time.sleep(0.01)
        with open(start, "wb") as f:
            f.write(b"x")
        child = int(_wait_for(printed, r'"pid":(\d+),"size":1001', None).group(1))
        # alive when seized: at the gate FIFO, or waiting for its grandchild, which
        # is held until cudaprobe has taken the child's record (it comes first)
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        with open(gate, "wb") as f:
            f.write(b"x")
        assert proc.wait(timeout=HANG_S) == 0
        err = proc.stderr.read().decode()
        assert status.read_text().strip() == "0", err
        said, summary, by_pid = _each_exact(out, printed.read_text())
        untraced = {u["pid"] for u in summary["untraced"]}
        assert len(said) == 3
        assert by_pid[child] < 3 and child in untraced, err  # its calls before: said
        for p in said:
            assert by_pid[p["pid"]] == p["calls"] or p["pid"] in untraced, (p, err)
        grandchild = said[2]["pid"]
        assert by_pid[grandchild] == 3 and grandchild not in untraced, err
    finally:
        _kill_workloads(mark, proc.pid)


def test_a_child_is_held_while_cudaprobe_itself_cannot_run(tmp_path, libcudart):
    """cudaprobe's own process stopped (SIGSTOP), its seizer not, as fork_calls
    forks a child: the seizer, a process of its own, seizes the child in its
    fork all the same (cudaprobe's threads, making rows, may not run for longer
    than the hold's bound on a busy machine), and the child stays stopped, its
    tracer the seizer, until cudaprobe goes on and links it: its calls are
    traced from the first, and its grandchild's too."""
    start = tmp_path / "start"
    os.mkfifo(start)
    proc, status, printed, mark = _trace_fork_calls(
        tmp_path, libcudart, 1, 3, dict(os.environ, CUDAPROBE_FORK_HOLD_MS="2000",
                                        FORK_CALLS_START=str(start)))
    try:
        parent = int(_wait_for(printed, r'"pid":(\d+),"size":1,', proc).group(1))
        seizer, = _children_named(proc.pid, "cudaprobe-seize")
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + HANG_S
        while _state(proc.pid) != b"T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with open(start, "wb") as f:
            f.write(b"x")
        while not (children := _children_named(parent, "fork_calls")) \
                or _tracer(children[0]) != seizer or _state(children[0]) != b"t":
            assert time.monotonic() < deadline, printed.read_text()
            time.sleep(0.01)
        assert not re.search(r'"size":1001', printed.read_text())  # held: no call yet
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=HANG_S) == 0
        err = proc.stderr.read().decode()
        said, summary, by_pid = _each_exact(tmp_path / "calls.jsonl", printed.read_text())
        assert len(said) == 3 and status.read_text().strip() == "0", err
        assert all(by_pid[p["pid"]] == 3 for p in said[1:]), (said, err)
        assert not summary.get("untraced"), err
    finally:
        _kill_workloads(mark, proc.pid)


def test_a_seizer_killed_is_started_again(tmp_path, libcudart):
    """The seizer killed (kill -9: an OOM killer, an administrator) while
    fork_calls forks 1,000 children one after another: the kernel lets the
    children it held go, cudaprobe says so and starts another, and the tree
    ends as without cudaprobe: every status its own, and every process's calls
    traced or said, none lost unsaid but at the very moment of the kill."""
    proc, status, printed, mark = _trace_fork_calls(
        tmp_path, libcudart, 1000, 2, dict(os.environ, CUDAPROBE_FORK_HOLD_MS="2000"))
    try:  # (a bound long enough for any load: held but around the kill)
        _wait_for(printed, r'"size":5001', None)  # children made, and held, by now
        seizer, = _children_named(proc.pid, "cudaprobe-seize")
        os.kill(seizer, signal.SIGKILL)
        said = _tree_ended(status, printed, time.monotonic() + HANG_S)
        assert proc.wait(timeout=HANG_S) == 0
        err = proc.stderr.read().decode()
        assert f"the seizer of forked children (pid {seizer}, cudaprobe-seize) was killed" in err
        assert len(said) == 1 + 1000 + 1000
        _, summary, by_pid = _each_exact(tmp_path / "calls.jsonl", printed.read_text())
        untraced = {u["pid"] for u in summary["untraced"]}
        unsaid = [p for p in said if by_pid[p["pid"]] != p["calls"] and p["pid"] not in untraced]
        assert len(unsaid) <= 1, unsaid  # (one told of as the seizer died)
        assert len(untraced) < 1000  # another seizer held the rest
    finally:
        _kill_workloads(mark, proc.pid)


def test_children_forked_at_once_are_each_traced_or_said(tmp_path, libcudart):
    """The same, six children forked in a row with no wait, by two threads:
    on a machine with few cores, some may wait longer than the bound to be
    seized (cudaprobe's thread waits for a core while they wait in the
    kernel); each of those goes on, and is said. None is unsaid, and the tree
    is as without cudaprobe."""
    exe = build_workload("fork_calls.c")
    out = tmp_path / "calls.jsonl"
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-e", "cudaMalloc", "-o", str(out),
                         "--", str(exe), "6", "3")
    assert proc.returncode == 0, proc.stderr
    said, summary, by_pid = _each_exact(out, proc.stderr)
    untraced = {u["pid"] for u in summary.get("untraced") or []}
    assert len(said) == 1 + 6 + 6
    for p in said:
        assert by_pid[p["pid"]] == p["calls"] or p["pid"] in untraced, (p, proc.stderr)
    assert summary["lost_total"] == 0


def _trace_fork_calls(tmp_path: Path, libcudart: Path, children: int, calls: int = 1,
                      env: dict[str, str] | None = None, **popen
                      ) -> tuple[subprocess.Popen, Path, Path, str]:
    """`trace -o calls.jsonl -- sh -c 'fork_calls CHILDREN CALLS seq; echo $?'`
    started, with `env` (else this one's): (cudaprobe, the file the shell writes
    the status to, the file of what fork_calls printed, the mark its processes
    carry)."""
    exe = build_workload("fork_calls.c")
    status, printed = tmp_path / "status", tmp_path / "printed"
    script = f"'{exe}' {children} {calls} seq 2> '{printed}'; echo $? > '{status}'"
    env, mark = marked(env)
    proc = subprocess.Popen(cudaprobe_cmd("trace", "--lib", str(libcudart), "-e", "cudaMalloc",
                                          "-o", str(tmp_path / "calls.jsonl"), "--",
                                          "sh", "-c", script),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, **popen)
    return proc, status, printed, mark


def _tree_ended(status: Path, printed: Path, deadline: float) -> list[dict]:
    """Once the shell has written fork_calls' status (by `deadline`): that it is
    0, and the line each of its processes printed."""
    while not status.exists() or not status.read_text().strip():
        assert time.monotonic() < deadline, printed.read_text()[-500:]
        time.sleep(0.05)
    assert status.read_text().strip() == "0", printed.read_text()[-500:]
    return [json.loads(t) for t in printed.read_text().splitlines() if t.startswith("{")]


def test_kill_9_while_children_are_held_leaves_the_tree_whole(tmp_path, libcudart):
    """cudaprobe killed (SIGKILL) while fork_calls forks 300 children one after
    another, each held as it is made: the kernel lets a held child go (the
    hold's bound, or the end of its tracer), and the tree ends as without
    cudaprobe: every child's status its own, every process's line printed."""
    proc, status, printed, mark = _trace_fork_calls(tmp_path, libcudart, 300)
    try:
        _wait_for(printed, r'"size":5001', None)  # children made, and held, by now
        proc.kill()
        proc.wait(timeout=HANG_S)
        assert len(_tree_ended(status, printed, time.monotonic() + HANG_S)) == 1 + 300 + 300
    finally:
        _kill_workloads(mark, proc.pid)


def _children_named(pid: int, name: str) -> list[int]:
    """The child processes of `pid` (made by any of its threads) whose name
    (comm) is `name`."""
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
        except OSError:
            pass  # a thread gone
    found = []
    for child in children:
        try:
            with open(f"/proc/{child}/comm") as f:
                if f.read().strip() == name:
                    found.append(child)
        except OSError:
            pass  # gone
    return found


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0]


def test_ctrl_z_lets_every_held_child_go(tmp_path, libcudart):
    """cudaprobe stopped by SIGTSTP (Ctrl-Z) while fork_calls forks children one
    after another, each held in its fork: it lets go of any child it holds
    before it stops, and holds none until it goes on, so the tree runs to its
    end while cudaprobe is stopped (a child it held then would wait for it);
    then it goes on and ends with the command's status. (Whether a child is
    held at the very moment of the stop depends on timing; that it is let go
    if it is does not.)"""
    # a group of its own whose parent is in another group of the session, as a
    # shell's job is: the kernel discards a stop signal to an orphaned group (an
    # xdist worker's may be one)
    proc, status, printed, mark = _trace_fork_calls(tmp_path, libcudart, 150, process_group=0)
    try:
        _wait_for(printed, r'"size":3001', None)  # children made, and held, by now
        os.kill(proc.pid, signal.SIGTSTP)
        deadline = time.monotonic() + HANG_S
        while _state(proc.pid) != b"T":  # (its handler lets the children go first)
            assert time.monotonic() < deadline, _state(proc.pid)
            time.sleep(0.01)
        assert len(_tree_ended(status, printed, deadline)) == 1 + 150 + 150
        assert _state(proc.pid) == b"T"  # stopped all along
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=HANG_S) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        _kill_workloads(mark, proc.pid)
