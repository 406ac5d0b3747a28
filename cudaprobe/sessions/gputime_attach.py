"""--gpu-time on processes that are already running (--pid, --comm): the
GPU-time library injected into each (targets/inject.py, at a safe point that
probe/safepoint.py finds), its records read from a memfd in the process, a
heartbeat kept in its memory while tracing, and its recording stopped at
the end. Every reason not to have GPU time for a process is one line; the
trace goes on without it. docs/gputime.md says what is done, step by step.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cudaprobe.decode.gputime import GpuReader, GpuWork
from cudaprobe.errors import CudaprobeError
from cudaprobe.probe.safepoint import SafePoint
from cudaprobe.targets.cupti import build_library, cupti_source_dir, find_libcupti
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.inject import (
    CodeSpace,
    Mapping,
    ProcessMemory,
    StubCall,
    code_space,
    fill_memfd,
    mappings,
    open_memfd,
    read_layout,
    run_stub,
    stub_code,
)
from cudaprobe.targets.injectable import CudaView, cuda_view, refusal, stop_signal
from cudaprobe.targets.procmaps import same_mount_namespace
from cudaprobe.targets.ptrace import PtraceError, TracedThread

SAFE_POINT_S = 5.0  # how long a CUDA call entry is waited for, in all
THREAD_WAIT_S = 1.0  # how long one seized thread gets to reach one
STUB_WAIT_S = 30.0  # how long the stub may take (loading CUPTI on a GPU: seconds)
HEARTBEAT_S = 0.5
STOP_WAIT_S = 10.0  # for the library to flush and stop
ENTRY_SLACK = 16  # the stop comes after the probed instruction: entry + its length
RECORDS_NAME = "/memfd:cudaprobe-gpu-records (deleted)"
FALLOC_PUNCH_HOLE = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def say_outcome(reader: GpuReader, notify: Callable[[str], None], nothing: str
                ) -> list[GpuWork]:
    """What came of the GPU time, in a line each; the work read. `nothing`: why,
    when no process wrote a file. (Here, not in sessions/gputime.py, which
    imports this module.)"""
    if not reader.seen:
        why = "; ".join(sorted(set(reader.statuses.values())))
        if not why:
            why = "no kernel, copy or memset ran on a GPU" if reader.files else nothing
        notify(f"--gpu-time: no GPU activity was recorded: {why}")
    if reader.dropped:
        notify(f"--gpu-time: CUPTI dropped {reader.dropped} activity records "
               "(its buffers were full)")
    if reader.foreign_tids and reader.seen:
        notify(f"--gpu-time: in {reader.foreign_tids} processes CUPTI could not "
               "give the kernel's thread ids: their GPU work is not joined to rows")
    if reader.all_api_records and reader.seen:
        notify(f"--gpu-time: in {reader.all_api_records} processes CUPTI recorded "
               "every CUDA call, not only launches and copies (its libcupti lacks "
               "cuptiActivityEnableRuntimeApi): it cost the program more")
    if reader.bad_files:
        notify(f"--gpu-time: {reader.bad_files} GPU-time files were unreadable")
    return reader.work


@dataclass
class Injected:
    pid: int
    mem: ProcessMemory
    control: int  # address of the library's control block
    records_fd: int  # ours: the memfd the library writes


class GpuTimeAttach:
    """The GPU-time library in running processes: attach(pid) each, poll()
    while tracing, read() at the end (recording stopped first)."""

    def __init__(self, notify: Callable[[str], None], keep: bool = True) -> None:
        self.notify = notify
        self.keep = keep
        self._stopped = False
        self.env: dict[str, str] = {}
        self.library, why = build_library()
        self.reader: GpuReader | None = None
        self._done: list[Injected] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._beats: threading.Thread | None = None
        if self.library is None:
            notify(f"no GPU time: {why}")
            return
        self.layout = read_layout(cupti_source_dir() / "inject.h")
        self.stub = stub_code(self.library)
        self.memfd_name = "cudaprobe-" + self.library.stem  # gputime-<hash of its source>
        self.reader = GpuReader(None, keep)

    @property
    def dropped(self) -> int:
        return self.reader.dropped if self.reader is not None else 0

    def attach_all(self, pids: list[int]) -> None:
        for pid in sorted(pids):
            self.attach(pid)

    def attach(self, pid: int) -> None:
        if self.reader is None:
            return
        try:
            why = self._attach(pid)
        except (OSError, CudaprobeError) as e:
            why = str(e)
        except Exception as e:  # noqa: BLE001 - bcc raises bare Exception: one line, trace on
            why = f"the safe-point probes failed: {str(e).splitlines()[0]}"
        if why:
            self.notify(f"no GPU time for pid {pid}: {why}")

    def _attach(self, pid: int) -> str:
        why = refusal(pid)
        if why:
            return why
        maps = mappings(pid)
        view = cuda_view(pid, maps)
        if not view.libraries:
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
        mem = ProcessMemory(pid)
        try:
            if mem.read(space.stub_address, len(self.stub)) != self.stub:
                mem.write(space.stub_address, self.stub)
            return self._at_safe_point(pid, view, mem, space, call)
        finally:
            if not any(i.mem is mem for i in self._done):
                mem.close()

    def _call(self, pid: int, loaded: list[Mapping], mapped_cupti: str) -> StubCall:
        """Load the library, or call it where it is loaded already."""
        cupti = ""
        if same_mount_namespace(pid):
            cupti = os.environ.get("CUDAPROBE_CUPTI") or str(find_libcupti() or "")
        text = mapped_cupti or cupti  # the program's own libcupti first: one CUPTI a process
        args = (0, os.getpid(), 1)
        if loaded:
            fn = loaded[0].start + read_symbols(str(self.library)).vaddrs["gputime_inject_attach"]
            return StubCall(fn=fn, args=args, text=text, text_arg=0)
        return StubCall(symbol="gputime_inject_attach", args=args, text=text, text_arg=0,
                        memfd_name=self.memfd_name)

    def _fill(self, pid: int, fd: int) -> str:
        return fill_memfd(pid, fd, f"/memfd:{self.memfd_name} (deleted)",
                          self.library.read_bytes())

    def _at_safe_point(self, pid: int, view: CudaView, mem: ProcessMemory, space: CodeSpace,
                       call: StubCall) -> str:
        """The stub run by the first thread caught at an outermost CUDA call entry;
        the recording taken on at once (the library's heartbeat runs from its start)."""
        tried: set[int] = set()
        with SafePoint(pid, view.libraries, view.inside) as point:
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
                sig = stop_signal(pid, tid)
                if not sig:
                    continue
                try:
                    thread = TracedThread(tid)
                except PtraceError as e:
                    if e.errno == 1:  # EPERM
                        return f"ptrace is not allowed on it ({e.strerror})"
                    continue  # the thread exited
                try:
                    if not self._caught(thread, point, sig, deadline):
                        continue
                    result = run_stub(thread, sig, mem, self.layout, space, call,
                                      lambda fd: self._fill(pid, fd), STUB_WAIT_S)
                    if result.done:
                        thread.detach(0)  # on through the stub's end, back to its call
                    else:
                        return f"the injection did not finish: {result.error}"
                    if call.fn == 0 and not result.handle:
                        return f"its loader refused the library: {result.error or '?'}"
                    if not result.result:
                        return "the library's attach function was not found"
                    return self._started(pid, mem, result.result)
                finally:
                    point.disarm(tid)
                    thread.release(sig)
        return (f"no thread of it entered a CUDA call within {SAFE_POINT_S:.0f} s "
                   "(the safe point the library is loaded at): it runs on untouched")

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

    def _started(self, pid: int, mem: ProcessMemory, control: int) -> str:
        L = self.layout
        block = mem.read(control, L["CONTROL_SIZE"])
        state, fd, owner = struct.unpack_from("<IiI", block, L["C_STATE"])
        why = block[L["C_WHY"]:].split(b"\0", 1)[0].decode(errors="replace")
        if state == L["ATTACH_REFUSED"]:
            return why or "the library refused"
        if owner != os.getpid() or state != L["ATTACH_RECORDING"]:
            return (f"its GPU-time library is recording for cudaprobe pid {owner} (or one "
                    "killed less than 5 s ago)")
        ours = open_memfd(pid, fd, RECORDS_NAME, os.O_RDWR)
        if ours is None:
            return "the library's records memfd is not where it said"
        with self._lock:
            self._done.append(Injected(pid, mem, control, ours))
        self.reader.add_file(Path(f"/proc/self/fd/{ours}"))
        if self._beats is None:
            self._beats = threading.Thread(target=self._heartbeat, daemon=True)
            self._beats.start()
        self.notify(f"--gpu-time: the GPU-time library is recording in pid {pid}")
        return ""

    def _heartbeat(self) -> None:
        """Each HEARTBEAT_S: the heartbeat in each process; the records read
        (trace, stats: serve reads its own) and their pages freed in the memfd,
        which is the process's memory."""
        beat = 1
        while not self._stopping.wait(HEARTBEAT_S):
            beat += 1
            with self._lock:
                for i in self._done:
                    try:
                        i.mem.write(i.control + self.layout["C_HEARTBEAT"],
                                    struct.pack("<Q", beat))
                    except OSError:
                        pass  # it exited: its records are in our memfd
                if self.keep:
                    self.reader.poll()
                self._free_read()

    def _free_read(self) -> None:
        """Pages already read given back (under the lock)."""
        for i in self._done:
            done = self.reader.offset(Path(f"/proc/self/fd/{i.records_fd}")) // 4096 * 4096
            if done:
                _libc.fallocate(i.records_fd, FALLOC_PUNCH_HOLE, 0, done)

    def stop(self) -> None:
        """Recording stopped in every process, what CUPTI held flushed."""
        if self._stopped or self.reader is None:
            return
        self._stopped = True
        self._stopping.set()
        if self._beats is not None:
            self._beats.join()
        L = self.layout if self.reader is not None else {}
        with self._lock:
            injected = list(self._done)
        for i in injected:
            try:
                i.mem.write(i.control + L["C_STOP"], struct.pack("<I", 1))
            except OSError:
                continue
        deadline = time.monotonic() + STOP_WAIT_S
        for i in injected:
            while time.monotonic() < deadline:
                try:
                    state = struct.unpack("<I", i.mem.read(i.control + L["C_STATE"], 4))[0]
                except OSError:
                    break
                if state == L["ATTACH_STOPPED"]:
                    break
                time.sleep(0.02)
            else:
                self.notify(f"--gpu-time: pid {i.pid} did not say it stopped recording within "
                            f"{STOP_WAIT_S:.0f} s: its last records may be missing")

    def poll(self) -> list[GpuWork]:
        """What the processes wrote since the last poll (serve: live)."""
        if self.reader is None:
            return []
        with self._lock:
            new = self.reader.poll()
            self._free_read()
        return new

    def read(self) -> list[GpuWork]:
        """Recording stopped; every record read; what came of it said."""
        if self.reader is None or not self._done:
            return []
        self.stop()
        self.reader.poll()
        return say_outcome(self.reader, self.notify, "the library wrote nothing")

    def close(self) -> None:
        self.stop()
        with self._lock:
            for i in self._done:
                os.close(i.records_fd)
                i.mem.close()
            self._done.clear()

