"""Getting the GPU-time library into one running process, or saying why not
(sessions/gputime_attach.py takes the recording on from there): the checks,
the safe point (probe/safepoint.py), the stub run by the thread caught there
(targets/inject.py). docs/gputime.md says what is done, step by step.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cudaprobe.probe.safepoint import SafePoint, SafePointProgram
from cudaprobe.sessions.gputime_control import quoted
from cudaprobe.targets.cupti import cupti_library
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.environment import status_field
from cudaprobe.targets.inject import (
    CodeSpace,
    Mapping,
    ProcessMemory,
    StubCall,
    code_space,
    fill_memfd,
    mappings,
    run_stub,
)
from cudaprobe.targets.injectable import (
    SECCOMP_WHY,
    CudaView,
    cuda_view,
    refusal,
    stop_signal,
    under_seccomp,
)
from cudaprobe.targets.openfile import OpenedFile
from cudaprobe.targets.pidfd import HeldProcess
from cudaprobe.targets.procmaps import same_mount_namespace
from cudaprobe.targets.ptrace import PtraceError, TracedThread

SAFE_POINT_S = 5.0  # how long a CUDA call entry is waited for, in all
THREAD_WAIT_S = 1.0  # how long one seized thread gets to reach one
STUB_WAIT_S = 30.0  # how long the stub may take (loading CUPTI on a GPU: seconds)
ENTRY_SLACK = 16  # the stop comes after the probed instruction: entry + its length
Started = Callable[[ProcessMemory, int], str]


class Injector:
    """The library (its file, the stub copied out of it, the frame's layout)
    into a process: inject(process), once per attach."""

    def __init__(self, library: Path, layout: dict[str, int], stub: bytes,
                 memfd_name: str, program: SafePointProgram | None = None) -> None:
        self.library = library
        self.layout = layout
        self.stub = stub
        self.memfd_name = memfd_name
        self.program = program  # the safe point's BPF, compiled once (None: each its own)
        # the GPU work alone recorded, no API record (nothing is to be joined to calls:
        # serve without --py-stacks); CUPTI's API records are its dearest part
        self.work_only = False
        # the calls that queue GPU work tied to it by CUPTI's callbacks on those
        # functions alone, no API record kind on (serve --py-stacks)
        self.call_ties = False

    def inject(self, process: HeldProcess, started: Started, point: SafePoint | None = None,
               caught: tuple[TracedThread, int] | None = None) -> str:
        """The library in, and `started(mem, address)` called with the process's
        memory and what its attach function returned, at once (the library's
        heartbeat runs from then: the safe-point probes are taken off after);
        why not, or what `started` said. Each check by pid below is of
        `process`: its /proc/PID/mem is opened after them, and confirmed its
        (alive) once open. `mem` is closed here unless `started` said "".
        `point`: safe-point probes on already (a process held at its open);
        `caught`: a thread of it seized and stopped at the safe point, with the
        signal that stopped it (the caller releases it)."""
        pid = process.pid
        why = refusal(pid, ours=caught is not None)
        if why:
            return why
        maps = mappings(pid)
        view = cuda_view(pid, maps)
        if not view.libraries and point is None and caught is None:
            # (with its safe point on already: a runtime linked into the program loads
            # libcuda only in its first call)
            return "it maps no CUDA library (libcuda, libcudart)"
        space = code_space(pid, maps)
        if isinstance(space, str):
            return space
        if space.room < len(self.stub):
            return f"no room for the loader's {len(self.stub)} bytes at the end of its C library"
        loaded = [m for m in maps if m.path.startswith("/memfd:cudaprobe-gputime-")]
        if loaded and not any(self.memfd_name in m.path for m in loaded):
            return ("it holds the GPU-time library of another cudaprobe version: "
                    "restart it to use this one's")
        call = self._call(pid, [m for m in loaded if m.offset == 0], view.cupti)
        try:
            mem = ProcessMemory(process)
        except ProcessLookupError:
            return "it has exited"
        why = "the injection did not finish"
        try:
            if caught is not None:
                why = self._in_caught(process, caught, mem, space, call, started)
            else:
                why = self._at_safe_point(process, view, mem, space, call, started, point)
        finally:
            if why:
                mem.close()
        return why

    def _call(self, pid: int, loaded: list[Mapping], mapped_cupti: str) -> StubCall:
        """Load the library, or call it where it is loaded already."""
        cupti = ""
        if same_mount_namespace(pid):
            cupti = cupti_library()
        text = mapped_cupti or cupti  # the program's own libcupti first: one CUPTI a process
        owner = os.getpid() | (self.layout["ATTACH_WORK_ONLY"] if self.work_only
                               else self.layout["ATTACH_CALL_TIES"] if self.call_ties else 0)
        args = (0, owner, 1)
        if loaded:
            fn = loaded[0].start + read_symbols(str(self.library)).vaddrs["gputime_inject_attach"]
            return StubCall(fn=fn, args=args, text=text, text_arg=0)
        return StubCall(symbol="gputime_inject_attach", args=args, text=text, text_arg=0,
                        memfd_name=self.memfd_name)

    def _fill(self, process: HeldProcess, fd: int) -> str:
        return fill_memfd(process, fd, f"/memfd:{self.memfd_name} (deleted)",
                          self.library.read_bytes())

    def _in_caught(self, process: HeldProcess, caught: tuple[TracedThread, int],
                   mem: ProcessMemory, space: CodeSpace, call: StubCall,
                   started: Started) -> str:
        thread, sig = caught
        if under_seccomp(process.pid, thread.tid):
            return (f"its thread that made the first CUDA call runs under a seccomp filter, "
                    f"{SECCOMP_WHY}: it runs on untouched")
        got = self._run(process, thread, sig, mem, space, call)
        return got if isinstance(got, str) else started(mem, got)

    def inject_held(self, process: HeldProcess, libraries: list[OpenedFile], started: Started,
                    release: Callable[[], None], stopping: threading.Event) -> str:
        """A process held at its open of a probed CUDA library (opengate.py),
        before it can make a CUDA call: its safe-point probes go on, its main
        thread is seized and armed, then its open goes on (`release`); at its
        first CUDA call the library goes in (then every kernel it runs is
        timed). If another thread calls first, or none within SAFE_POINT_S
        (the main thread is let go then), the usual way from there: the
        busiest thread, at its next call. Waits as long as the process runs
        and `stopping` is not set; "" also when it made no CUDA call."""
        pid = process.pid
        thread: TracedThread | None = None
        sig = 0
        with contextlib.ExitStack() as stack:
            try:
                point = stack.enter_context(SafePoint(pid, libraries, [], self.program))
                with contextlib.suppress(PtraceError):  # gone, or not ours to trace
                    thread = TracedThread(pid)
                if thread is not None:
                    stack.callback(lambda: thread.release(sig))
                    sig = stop_signal(pid, pid)
                    if sig:
                        point.arm(pid, sig)
            finally:
                release()
            if thread is not None and sig:
                caught = self._first_call(process, thread, point, sig, stopping,
                                          time.monotonic() + SAFE_POINT_S)
                if caught:
                    why = self.inject(process, started, caught=(thread, sig))
                    if thread.attached:  # not let go by the stub's end: on from its stop
                        with contextlib.suppress(PtraceError):
                            thread.resume(0)
                    return why
                point.disarm(pid)
                thread.release(sig)
            while not stopping.wait(0.005):  # no first call caught: the usual way
                if point.busiest_threads():
                    return self.inject(process, started, point=point)
                if not process.alive():
                    return ""
        return ""

    def _first_call(self, process: HeldProcess, thread: TracedThread, point: SafePoint,
                    sig: int, stopping: threading.Event, deadline: float) -> bool:
        """The seized main thread stopped by our signal at a CUDA call entry
        made from outside CUDA's code (checked now that the process maps it);
        False if it exited, job control stopped it, another thread called CUDA
        first, or none came by `deadline` (it is let go then: a process that
        makes no CUDA call soon is not kept traced)."""
        while not stopping.is_set() and time.monotonic() < deadline:
            stop = thread.wait(0.05)
            if stop is None:
                if point.busiest_threads() and point.signalled_at(thread.tid) is None:
                    return False  # another thread calls CUDA: the usual way
                continue
            if stop.exited or stop.event:
                return False
            if stop.signal != sig:
                thread.resume(stop.signal)
                continue
            at = point.signalled_at(thread.tid)
            regs = thread.registers()
            inside = cuda_view(process.pid, mappings(process.pid)).inside
            point.set_inside(inside)
            if at is not None and at - 1 <= regs.rip < at + ENTRY_SLACK and not _called_from(
                    process, regs.rsp, inside):
                return True
            thread.resume(0)  # ours, elsewhere, or CUDA calling itself: the next entry
            point.arm(thread.tid, sig)
        return False

    def _at_safe_point(self, process: HeldProcess, view: CudaView, mem: ProcessMemory,
                       space: CodeSpace, call: StubCall, started: Started,
                       point: SafePoint | None = None) -> str:
        """The stub run by the first thread caught at an outermost CUDA call entry;
        the recording taken on at once (the library's heartbeat runs from its start).
        A thread is checked as itself once seized (ours, and so until released),
        and again once stopped: no seccomp filter of its own."""
        pid = process.pid
        tried: set[int] = set()
        filtered = 0
        on = (contextlib.nullcontext(point) if point is not None
              else SafePoint(pid, view.libraries, view.inside, self.program))
        with on as point:
            point.set_inside(view.inside)
            deadline = time.monotonic() + SAFE_POINT_S  # from the probes' start
            if not point.probes:
                return "its CUDA libraries define none of the calls a safe point is taken at"
            while time.monotonic() < deadline:
                fresh = [t for t in point.busiest_threads() if t not in tried]
                if not fresh:
                    time.sleep(0.005)
                    continue
                tid = fresh[0]
                tried.add(tid)
                try:
                    thread = TracedThread(tid)
                except PtraceError as e:
                    if e.errno == 1:  # EPERM
                        return f"ptrace is not allowed on it ({e.strerror})"
                    continue  # the thread exited
                sig = 0
                try:
                    # the tid seen by the probe may have been another's by the seize
                    if not (status_field("Tgid", tid) == str(pid) and process.alive()):
                        continue
                    sig = stop_signal(pid, tid)
                    if under_seccomp(pid, tid):
                        filtered += 1
                        continue
                    if not sig or not self._caught(thread, point, sig, deadline):
                        continue
                    if under_seccomp(pid, tid):  # another thread's TSYNC since
                        filtered += 1
                        thread.resume(0)
                        continue
                    got = self._run(process, thread, sig, mem, space, call)
                    return got if isinstance(got, str) else started(mem, got)
                finally:
                    point.disarm(tid)
                    thread.release(sig)
        if filtered:
            return (f"its threads that make CUDA calls run under a seccomp filter, {SECCOMP_WHY}:"
                    " it runs on untouched")
        if not process.alive():
            return "it has exited"
        stopped = refusal(pid)
        if stopped.startswith(("it is stopped", "it is a zombie", "it has exited")):
            return stopped  # (stopped or gone while the safe point waited)
        return (f"no thread of it entered a CUDA call within {SAFE_POINT_S:.0f} s "
                   "(the safe point the library is loaded at): it runs on untouched")

    def _run(self, process: HeldProcess, thread: TracedThread, sig: int, mem: ProcessMemory,
             space: CodeSpace, call: StubCall) -> int | str:
        """The stub run by `thread`, stopped at the safe point: what the attach
        function returned, or why it did not run."""
        result = run_stub(thread, sig, mem, self.layout, space, self.stub, call,
                          lambda fd: self._fill(process, fd), STUB_WAIT_S)
        if result.done:
            thread.detach(0)  # on through the stub's end, back to its call
        else:
            return f"the injection did not finish: {result.error}"
        if call.fn == 0 and not result.handle:
            return f"its loader refused the library: dlerror() said {quoted(result.said)}"
        if not result.result:
            return "the library's attach function was not found"
        return int(result.result)

    def _caught(self, thread: TracedThread, point: SafePoint, sig: int, deadline: float) -> bool:
        """The seized thread stopped by our signal at a probed entry."""
        point.arm(thread.tid, sig)
        until = min(deadline, time.monotonic() + THREAD_WAIT_S)
        while (left := until - time.monotonic()) > 0:
            stop = thread.wait(left)
            if stop is None or stop.exited:
                return False
            if stop.event:  # job control stopped it: let it be
                thread.detach(0)
                return False
            if stop.signal != sig:
                thread.resume(stop.signal)
                continue
            at = point.signalled_at(thread.tid)
            rip = thread.registers().rip
            if at is not None and at - 1 <= rip < at + ENTRY_SLACK:
                return True
            thread.resume(0)  # ours, elsewhere (it had it blocked): suppressed, try again
            point.arm(thread.tid, sig)
        return False


def _called_from(process: HeldProcess, rsp: int, inside: list[tuple[int, int]]) -> bool:
    """The return address at the stack pointer lies in CUDA's code (a call CUDA
    made within one of its own), or cannot be read."""
    try:
        mem = ProcessMemory(process)  # the held process's, not whoever has its pid now
    except (OSError, ProcessLookupError):
        return True
    try:
        word = mem.read(rsp, 8)
    except OSError:
        return True
    finally:
        mem.close()
    if len(word) != 8:
        return True
    ret = int.from_bytes(word, "little")
    return any(lo <= ret < hi for lo, hi in inside)
