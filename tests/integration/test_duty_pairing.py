"""serve --duty's slices and the pairing of a call's entry with its return,
on the real probes. A call under way as a slice ends, whose return comes
after the links are out, leaves its pairing entry filled. A call begun as
the next slice's links go in, after the return link and before the entry
link (or the `phase` word's TRACING), has its return seen and no entry of
its own: it must not pair with the one left (it made one launch of a
PyTorch job span seconds, and a node's join of kernels to their lines
counted a slice's kernels many times over). The slices are driven here by
the Attacher's pause and resume, the calls by the program's cues, and the
order of events by states (the call begun in the library, the links'
breakpoint gone), not by times."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.probe import bpfprog, uprobe_multi
from cudaprobe.probe.event import R_DURATION, R_FUNC_ID
from cudaprobe.probe.plan import plan_probes
from cudaprobe.probe.tracer import Tracer

from ..conftest import HANG_S, build_workload
from .memstub import build_memstub
from .test_per_process import INT3, first_byte

CUT_US = 3_000_000  # the call under way as the slice ends: it returns once the links are out
LATE_US = 200_000  # the call begun as the next slice's links go in
# the program's system call once it has said "enter": asleep in the call (nanosleep,
# clock_nanosleep on x86-64), or back in read(2), the call over
BEGUN = {"35", "230", "0"}


def until(what: str, done) -> None:
    deadline = time.monotonic() + HANG_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def cue(program: subprocess.Popen, us: int) -> None:
    """The program told to make one call of `us` microseconds; returns once the
    call has begun (asleep in the library, or over: a loaded machine may run
    a short one whole before this looks)."""
    program.stdin.write(f"{us}\n")
    program.stdin.flush()
    assert program.stdout.readline() == f"enter {us}\n"
    until("the call begun", lambda: open(f"/proc/{program.pid}/syscall").read().split()[0]
          in BEGUN)


def left(program: subprocess.Popen, us: int) -> None:
    assert program.stdout.readline() == f"left {us}\n"


def test_a_call_cut_by_a_slice_s_end_never_pairs_with_a_later_return(tmp_path: Path,
                                                                     monkeypatch):
    stub = build_memstub()
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libcudart.so.13", "libcuda.so.1"):
        shutil.copy(stub / name, lib / name)
    runtime = str(lib / "libcudart.so.13")
    exe = build_workload("sync_on_cue.c")
    plan = plan_probes([catalogue.BY_NAME["cudaStreamSynchronize"]], [runtime])
    settings = bpfprog.Settings(duty_exact=frozenset({"cudaMalloc"}))  # as serve --duty
    if settings.attach != "multi":
        pytest.skip("no uprobe_multi links here: serve --duty does not cycle perf-event probes")
    program = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={"LD_LIBRARY_PATH": str(lib)})
    create_link = uprobe_multi.create_link
    resuming = []

    def late_call_between_links(fd, path, offsets, cookies, retprobe, pid=0):
        """As the next slice's return link is in and its entry link is not yet:
        a call begins."""
        link = create_link(fd, path, offsets, cookies, retprobe, pid)
        if retprobe and resuming:
            cue(program, LATE_US)  # (over already or not, its return probe was in)
        return link

    monkeypatch.setattr(uprobe_multi, "create_link", late_call_between_links)
    try:
        with Tracer(plan, settings) as tracer:
            tracer.attacher.start()
            cue(program, 1000)  # a whole call in the first slice
            left(program, 1000)
            cue(program, CUT_US)  # begun in the slice...
            assert tracer.pairing.in_flight()
            assert tracer.attacher.pause()  # ...which ends while it sleeps
            until("the links out", lambda: first_byte(program.pid, runtime,
                                                      "cudaStreamSynchronize") != INT3)
            left(program, CUT_US)
            resuming.append(True)
            assert tracer.attacher.resume()
            left(program, LATE_US)
            assert tracer.pairing.in_flight() == []  # the call cut off is not under way
            cue(program, 2000)  # a whole call in the second slice
            left(program, 2000)
            got = tracer.ring.drain()
            got = got.tuples() if hasattr(got, "tuples") else list(got)
            tracer.attacher.detach()
    finally:
        program.stdin.close()
        assert program.wait(timeout=HANG_S) == 0
    durations = sorted(r[R_DURATION] for r in got if r[R_FUNC_ID] == plan.probes[0].func_id)
    # the two whole calls only: not the one cut off, nor the late one (paired with
    # the other, it would last from the first slice into the second: over CUT_US)
    assert len(durations) == 2, durations
    assert 1_000_000 <= durations[0] < CUT_US * 1000
    assert 2_000_000 <= durations[1] < CUT_US * 1000
