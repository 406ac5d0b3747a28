"""Stopping cudaprobe never harms the traced program and leaves nothing behind.

Signals go to a real `cudaprobe trace -- steady_calls` subprocess. The test
process makes itself a child subreaper, so the workload, orphaned when
cudaprobe exits first, becomes its child: its exit status can then be
checked after cudaprobe is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cudaprobe.probe.cleanup import CLOSER_NAME, append_uprobe_event, remove_uprobe_events
from cudaprobe.probe.ringbuf import READER_NAME
from cudaprobe.probe.seizer import NAME as SEIZER

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .running import Lines, started

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

PR_SET_CHILD_SUBREAPER = 36
UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")
MODES = ("multi", "perf")


@pytest.fixture
def subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    _stop_orphaned_workloads()
    _reap_all()


def _stop_orphaned_workloads() -> None:
    """A test that failed before stopping its workload leaves it to us: our children
    named steady_calls are the workloads these tests started."""
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in map(int, children.read_text().split()):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "steady_calls":
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def uprobe_events() -> set[str]:
    return set(UPROBE_EVENTS.read_text().splitlines()) if UPROBE_EVENTS.exists() else set()


def left_behind(before: set[str], trace: Trace) -> list[str]:
    """uprobe_events entries that this trace made and did not remove (other
    tracers on the machine may come and go meanwhile)."""
    return [e for e in uprobe_events() - before
            if f"_bcc_{trace.proc.pid} " in e or "libcudart" in e]


def wait_closers_gone(timeout: float = HANG_S) -> None:
    """The perf fallback's background closer (cleanup.CLOSER_NAME) ends once
    every probe is closed; only then is the kernel's state final."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap_all()  # it is our child too, once orphaned: a zombie until reaped
        names = []
        for p in Path("/proc").glob("[0-9]*/comm"):
            try:
                names.append(p.read_text(errors="replace").strip())
            except OSError:
                continue
        if CLOSER_NAME not in names:
            return
        time.sleep(0.2)
    raise AssertionError("the background closer of perf probes is still running")


class Trace:
    """`cudaprobe trace -o calls.jsonl ARGS -- steady_calls LOOPS 1000 EXIT`, running."""

    def __init__(self, tmp: Path, libcudart: Path, mode: str, new_session: bool = False) -> None:
        self.out = tmp / "calls.jsonl"
        self.stdout = tmp / "stdout.txt"
        self.stderr = tmp / "stderr.txt"
        exe = build_workload("steady_calls.c")
        # the workload's functions only: 116 perf probes take 10 s to attach
        events = ["-e", "cudaGetDeviceCount,cudaMalloc,cudaFree"]
        argv = cudaprobe_cmd("trace", "--lib", str(libcudart), *events, "-o", str(self.out),
                             "--", str(exe), "0", "1000", "0")
        env = dict(os.environ, CUDAPROBE_ATTACH=mode)
        with open(self.stdout, "w") as so, open(self.stderr, "w") as se:
            self.proc = started(subprocess.Popen(argv, stdout=so, stderr=se, env=env,
                                                 start_new_session=new_session))

    def wait_started(self, timeout: float = HANG_S) -> None:
        """Until the workload runs (it is released only once the probes are in)
        and its first calls are in the trace: rows are written out each poll."""
        deadline = time.monotonic() + timeout
        while "argv[0]" not in self.stdout.read_text() or not (
                self.out.exists() and self.out.stat().st_size):
            assert self.proc.poll() is None, self.stderr.read_text()
            assert time.monotonic() < deadline, "the workload never started, or no call came"
            time.sleep(0.05)

    def workload_pid(self) -> int:
        """cudaprobe's child that is not its ring reader (ringbuf.READER_NAME),
        its seizer (seizer.NAME) or its open gate's keeper
        (cudaprobe/probe/gatekeeper.py)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        (pid,) = [pid for pid in map(int, children.split())
                  if Path(f"/proc/{pid}/comm").read_text().strip() not in (READER_NAME, SEIZER)
                  and b"gatekeeper.py" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
        return pid

    def wait(self, timeout: float = HANG_S) -> tuple[int, float]:
        start = time.monotonic()
        rc = self.proc.wait(timeout)
        return rc, time.monotonic() - start

    def records(self) -> tuple[list[dict], dict]:
        lines = [json.loads(line) for line in self.out.read_text().splitlines()]
        assert lines and "summary" in lines[-1], self.stderr.read_text()
        return lines[:-1], lines[-1]["summary"]


def stop_workload(pid: int) -> int:
    """SIGTERM the (orphaned, now our) workload; its exit status, shell-style."""
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def closers_of_ours() -> list[int]:
    """Our children (orphans this subreaper took in) that are perf probe closers,
    running or exited: a zombie keeps its name until it is reaped."""
    pids = []
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in map(int, children.read_text().split()):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == CLOSER_NAME:
                    pids.append(pid)
    return pids


def wait_closer_started(timeout: float = HANG_S) -> None:
    """The perf probes were handed to a background closer (cleanup.close_in_background)
    rather than closed one by one, 0.1 s each, before cudaprobe exits: it names
    itself first thing, and stays our child (a zombie once done) until reaped."""
    deadline = time.monotonic() + timeout
    while not closers_of_ours():
        assert time.monotonic() < deadline, "cudaprobe closed its perf probes itself"
        time.sleep(0.05)


@pytest.mark.parametrize(("sig", "mode"), [(signal.SIGINT, "multi"), (signal.SIGTERM, "multi"),
                                           (signal.SIGHUP, "multi"), (signal.SIGTERM, "perf")])
def test_stop_signal_detaches_and_leaves_the_program_running(tmp_path, libcudart, subreaper,
                                                             mode, sig):
    """In perf mode the probes are closed by a process of their own, which cudaprobe
    does not wait for (how long each way takes: docs/reliability.md)."""
    before = uprobe_events()
    trace = Trace(tmp_path, libcudart, mode)
    trace.wait_started()
    workload = trace.workload_pid()
    trace.proc.send_signal(sig)
    rc, _took = trace.wait()
    err = trace.stderr.read_text()
    assert rc == 128 + sig, err
    assert "Traceback" not in err
    if mode == "perf":
        wait_closer_started()
    assert f"stopped by {sig.name}" in err and f"(pid {workload}) keeps running" in err
    calls, summary = trace.records()
    assert summary["calls"] == len(calls) - summary["in_flight"] > 0
    assert summary["lost_total"] == 0
    assert {c["pid"] for c in calls} == {workload}
    # the workload was not touched: it runs on until told to stop, then exits cleanly
    assert os.path.exists(f"/proc/{workload}")
    assert stop_workload(workload) == 0
    assert "stopped by signal 15\nloops=" in trace.stdout.read_text()
    wait_closers_gone()
    assert left_behind(before, trace) == []


@pytest.mark.parametrize("mode", MODES)
def test_signals_during_teardown_are_ignored(tmp_path, libcudart, subreaper, mode):
    trace = Trace(tmp_path, libcudart, mode)
    trace.wait_started()
    workload = trace.workload_pid()
    for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if trace.proc.poll() is not None:
            break
        trace.proc.send_signal(sig)
        time.sleep(0.05)
    rc, _took = trace.wait()
    err = trace.stderr.read_text()
    assert rc == 128 + signal.SIGINT, err  # the first signal is the one acted on
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    _calls, summary = trace.records()
    assert summary["calls"] > 0
    assert stop_workload(workload) == 0
    wait_closers_gone()


@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_stops_both_and_every_call_is_traced(tmp_path, libcudart, subreaper, mode):
    """Ctrl-C signals the whole process group: the workload finishes its loop
    and exits 0, and its calls up to the last one are in the trace."""
    trace = Trace(tmp_path, libcudart, mode, new_session=True)
    trace.wait_started()
    os.killpg(trace.proc.pid, signal.SIGINT)
    rc, _took = trace.wait()
    assert rc == 0, trace.stderr.read_text()  # the workload's own exit status
    out = trace.stdout.read_text()
    assert "stopped by signal 2" in out
    loops = int(out.rsplit("loops=", 1)[1].split()[0])
    calls, summary = trace.records()
    assert summary["calls"] == len(calls) == 3 * loops
    assert summary["in_flight"] == 0 and summary["lost_total"] == 0
    assert calls[-1]["event"] == "cudaFree"
    wait_closers_gone()


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_leaves_the_program_running_unharmed(tmp_path, libcudart, subreaper, mode):
    before = uprobe_events()
    trace = Trace(tmp_path, libcudart, mode)
    trace.wait_started()
    workload = trace.workload_pid()
    trace.proc.kill()
    rc, _took = trace.wait(timeout=HANG_S)  # the kernel closes perf probes one by one
    assert rc == -signal.SIGKILL
    time.sleep(0.3)
    assert os.path.exists(f"/proc/{workload}")
    assert stop_workload(workload) == 0
    out = trace.stdout.read_text()
    assert "stopped by signal 15\nloops=" in out and "steady_calls: finished" in (
        trace.stderr.read_text())
    deadline = time.monotonic() + HANG_S  # (the gate's keeper removes them as it ends)
    while left_behind(before, trace) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left_behind(before, trace) == []


HOSTILE_ARGS = ["two words", "$(touch /tmp/cudaprobe-pwned)", "; echo no", "'\"", "ünï", "*"]


@pytest.mark.parametrize("exit_as", ["0", "3", "255", "sig6"])
def test_program_output_and_exit_status_are_the_same_traced(tmp_path, libcudart, exit_as):
    exe = build_workload("steady_calls.c")
    argv = [str(exe), "50", "0", exit_as, *HOSTILE_ARGS]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S)
    out = tmp_path / "calls.jsonl"
    traced = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out),
                                          "--", *argv),
                            capture_output=True, text=True, timeout=HANG_S)
    plain_status = plain.returncode if plain.returncode >= 0 else 128 - plain.returncode
    assert traced.returncode == plain_status, traced.stderr
    assert traced.stdout == plain.stdout
    assert plain.stderr in traced.stderr  # between cudaprobe's own lines
    assert not os.path.exists("/tmp/cudaprobe-pwned")
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    assert summary["calls"] == 150


def host_pid_above(floor: int) -> int:
    """A pid of this host above `floor` that stays alive through the test:
    this process's, or else a sleeper's (killed after the test)."""
    pid = os.getpid()
    while pid <= floor:
        pid = started(subprocess.Popen(["sleep", str(HANG_S)])).pid
    return pid


def test_stale_bcc_uprobe_events_are_removed_at_start(tmp_path, libcudart):
    """An entry whose bcc process is gone is removed when tracing starts, and
    one whose process runs is kept. cudaprobe runs here in a pid namespace of
    its own, where pids above a few are no process: an entry named after a pid
    of this host above 1000 that stays alive is stale to that cudaprobe alone.
    Any other cudaprobe on the machine (another suite's) sees the host's
    process and leaves the entry to ours."""
    if not UPROBE_EVENTS.exists():
        pytest.skip("tracefs is not mounted")
    tag = secrets.token_hex(4)  # (another suite running this test at once: its own names)
    stale = f"p_cudaprobe_test_{tag}_0x10_bcc_{host_pid_above(1000)}"
    alive = f"p_cudaprobe_test_{tag}_0x20_bcc_1"  # pid 1: cudaprobe itself there, init here
    proc = None
    try:
        append_uprobe_event(str(UPROBE_EVENTS), f"p:uprobes/{stale} /bin/true:0x10")
        append_uprobe_event(str(UPROBE_EVENTS), f"p:uprobes/{alive} /bin/true:0x20")
        # in a pid namespace cudaprobe probes every process using the library; the
        # entries are looked at while it traces (at its end, what bcc made for its
        # own pid, 1 there, goes: the entry named after pid 1 with it)
        proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc",
                                 *cudaprobe_cmd("trace", "--lib", str(libcudart), "-d", "60",
                                                "-o", str(tmp_path / "c.jsonl"))],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        err = Lines(proc.stderr)
        # "1", unless crashed tools left some too
        err.wait_for(lambda s: re.search(r"removed \d+ uprobe_events entries left by crashed "
                                         r"bcc tools", s), "the stale entries removed",
                     timeout=HANG_S)
        err.wait_for(lambda s: "tracing" in s, "tracing", timeout=HANG_S)
        events = "\n".join(uprobe_events())
        assert stale not in events
        assert alive in events  # its bcc process still runs: not stale
        os.killpg(proc.pid, signal.SIGINT)  # (unshare passes no signal on: its group's)
        # 0 once tracing (no command), 130 where the signal came while it attached
        assert proc.wait(timeout=HANG_S) in (0, 130), err.text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        remove_uprobe_events(str(UPROBE_EVENTS), [f"uprobes/{stale}", f"uprobes/{alive}"])


def test_an_entry_another_cudaprobe_removed_first_is_neither_removed_nor_kept():
    """Two cudaprobes starting together both find a stale entry; the second
    one's removal finds it gone (ENOENT), which is not 'could not be removed'."""
    if not UPROBE_EVENTS.exists():
        pytest.skip("tracefs is not mounted")
    dead = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids stay below pid_max
    name = f"p_cudaprobe_gone_0x10_bcc_{dead}"
    append_uprobe_event(str(UPROBE_EVENTS), f"p:uprobes/{name} /bin/true:0x10")
    assert remove_uprobe_events(str(UPROBE_EVENTS), [f"uprobes/{name}"])[1] == []
    assert remove_uprobe_events(str(UPROBE_EVENTS), [f"uprobes/{name}"]) == ([], [])
