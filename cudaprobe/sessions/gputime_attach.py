"""--gpu-time on processes that are already running (--pid, --comm): the
GPU-time library injected into each (sessions/gputime_inject.py), its
control block checked (sessions/gputime_control.py), its records read from
a memfd in the process, a heartbeat kept in its memory while tracing, and
its recording stopped at the end. Every reason not to have GPU time for a process is one line; the
trace goes on without it. docs/gputime.md says what is done, step by step.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import queue
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cudaprobe.decode.gputime import GpuReader, GpuWork
from cudaprobe.errors import CudaprobeError
from cudaprobe.probe.safepoint import SafePointProgram
from cudaprobe.sessions.gputime_control import quoted, read_control
from cudaprobe.sessions.gputime_inject import Injector
from cudaprobe.targets.cupti import build_library, cupti_source_dir
from cudaprobe.targets.inject import ProcessMemory, mappings, read_layout, stub_code
from cudaprobe.targets.injectable import opted_out, refusal_reason
from cudaprobe.targets.jobs import MAX_ENVIRON, read_proc
from cudaprobe.targets.openfile import OpenedFile
from cudaprobe.targets.pidfd import HeldProcess, take_memfd

HEARTBEAT_S = 0.5
SWEEP_S = 60.0
STOP_WAIT_S = 10.0  # for the library to flush and stop
CHILD_WAIT_S = 35.0  # for an injection into a later process under way at the end
RECORDS_NAME = "/memfd:cudaprobe-gpu-records (deleted)"
RECORDS_AT_START = 64 << 20  # what the library's records memfd may hold when handed over
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
               "(its buffers, or the library's of call ties, were full)")
    if reader.foreign_tids and reader.seen:
        notify(f"--gpu-time: in {reader.foreign_tids} processes CUPTI could not "
               "give the kernel's thread ids: their GPU work is not joined to rows")
    if reader.all_api_records and reader.seen:
        notify(f"--gpu-time: in {reader.all_api_records} processes CUPTI recorded "
               "every CUDA call, not only launches and copies (its libcupti lacks "
               "cuptiActivityEnableRuntimeApi): it cost the program more")
    if reader.attached_all_api and reader.seen:
        n = reader.attached_all_api
        notify(f"--gpu-time: CUPTI records every CUDA call of the {n} running "
               f"process{'es' if n > 1 else ''} it was put in (its switches for launches and "
               "copies alone give no record once CUDA runs): it costs "
               f"{'them' if n > 1 else 'it'} more while recorded")
    if reader.bad_files:
        notify(f"--gpu-time: {reader.bad_files} GPU-time files were unreadable")
    return reader.work


MAX_SAID = 5  # serve on a node: the lines said of each reason, the rest only counted
NODE_WORKERS = 4  # serve on a node: processes given the library at once
NODE_WAITING = 256  # serve on a node: processes waiting for it at most (the rest refused)


@dataclass
class Injected:
    pid: int
    process: HeldProcess  # held: its pid is never another's while read or written
    mem: ProcessMemory
    control: int  # address of the library's control block
    records_fd: int  # ours: the memfd the library writes


class GpuTimeAttach:
    """The GPU-time library in running processes: attach(pid) each, poll()
    while tracing, read() at the end (recording stopped first). A process that
    joins the trace later (a child, a later --comm process) gets it too, on a
    thread of its own: held(pid) when the open gate holds it before its first
    CUDA call, later(pid) otherwise."""

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
        self._children: list[threading.Thread] = []
        # (pid, image) tried: injected, or refused for a reason that stays
        self._joined: set[tuple[int, tuple[int, int] | None]] = set()
        self._began: dict[int, float] = {}  # pid -> when putting the library in began
        self._workers: dict[int, threading.Thread] = {}
        self.libraries: Callable[[], list[OpenedFile]] = list  # the probed CUDA libraries
        # told of each process that got no GPU time, with why (serve: counted by reason);
        # and of each the library records in
        self.on_refused: Callable[[int, str], None] | None = None
        self.on_recording: Callable[[int], None] | None = None
        self._next_sweep = 0.0  # serve: when what is kept of processes gone is next pruned
        self._said: dict[str, int] = {}  # reason -> lines said (found(): at most MAX_SAID)
        # serve on a node (found()): processes waiting for the library, and its workers
        self._found: queue.Queue[int] = queue.Queue(NODE_WAITING)
        self._node_workers: list[threading.Thread] = []
        self.program: SafePointProgram | None = None
        if self.library is None:
            notify(f"no GPU time: {why}")
            return
        self.layout = read_layout(cupti_source_dir() / "inject.h")
        self.memfd_name = "cudaprobe-" + self.library.stem  # gputime-<hash of its source>
        self.program = SafePointProgram.for_this_kernel()
        self.injector = Injector(self.library, self.layout, stub_code(self.library),
                                 self.memfd_name, self.program)
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
        image = _image(pid)
        self._began[pid] = time.monotonic()
        with self._lock:  # not again at its next open of a CUDA library (held)
            self._joined.add((pid, image))
        why = self._attach_quietly(pid)
        if why:
            self._refused(pid, why)

    def _refused(self, pid: int, why: str, quiet: bool = False) -> None:
        """No GPU time for `pid`: said (`quiet`: past MAX_SAID lines of its reason,
        only counted) and told."""
        if self.on_refused is not None:
            self.on_refused(pid, why)
        if quiet:
            reason = refusal_reason(why)
            said = self._said[reason] = self._said.get(reason, 0) + 1
            if said > MAX_SAID:
                return
            if said == MAX_SAID:
                why += (" (more such processes are counted in "
                        "cudaprobe_gpu_time_refusals_total, not said)")
        self.notify(f"no GPU time for pid {pid}: {why}")

    def found(self, pid: int) -> None:
        """serve on a node: a process seen making CUDA calls, running on already.
        The library goes in as with --pid, on one of NODE_WORKERS threads, once
        for each program image; a process it cannot go into is counted by its
        reason, and said for the first MAX_SAID of each."""
        if self.reader is None or self._stopping.is_set() or pid == os.getpid():
            return
        image = _image(pid)
        with self._lock:
            if image is None or (pid, image) in self._joined:
                return
            self._joined.add((pid, image))
            if len(self._node_workers) < NODE_WORKERS:
                worker = threading.Thread(target=self._node_worker, daemon=True,
                                          name="cudaprobe-gputime-node")
                self._node_workers.append(worker)
                worker.start()
        try:
            self._found.put_nowait(pid)
        except queue.Full:  # (a storm of CUDA processes: memory stays bounded)
            self._refused(pid, f"{NODE_WAITING} processes are waiting for the GPU-time library "
                          "already: it runs on untouched", quiet=True)

    def _node_worker(self) -> None:
        while not self._stopping.is_set():
            try:
                pid = self._found.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                continue
            self._began[pid] = time.monotonic()
            environ, comm = read_proc(pid, ("environ", MAX_ENVIRON), ("comm", 64))
            why = opted_out(environ, comm) or self._attach_quietly(pid)
            if why:
                self._refused(pid, why, quiet=True)

    def _attach_quietly(self, pid: int) -> str:
        """The library into a running process: why not, or ""."""
        try:
            return self._attach(pid)
        except ProcessLookupError:
            return "it has exited"
        except OSError as e:  # ESRCH from ptrace or /proc: it was killed meanwhile
            return "it has exited" if e.errno == errno.ESRCH else str(e)
        except CudaprobeError as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - bcc raises bare Exception: one line, trace on
            return f"the safe-point probes failed: {str(e).splitlines()[0]}"

    def held(self, pid: int) -> Callable[[Callable[[], None]], None] | None:
        """For the open gate (probe/opengate.py), a process of the traced tree
        held at its open of a probed library: a function that takes over the
        open's release and injects on a thread of its own (Injector.inject_held)."""
        if self.reader is None or self._stopping.is_set():
            return None
        return lambda release: self._start_child(pid, release)

    def later(self, pid: int) -> None:
        """A process that joined the trace without being held (a fork that maps
        its parent's CUDA libraries, a later --comm process): the same, on a
        thread of its own, with nothing to release."""
        if self.reader is not None and not self._stopping.is_set():
            self._start_child(pid, lambda: None)

    def _start_child(self, pid: int, release: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._child, args=(pid, release), daemon=True,
                                  name=f"cudaprobe-gputime-{pid}")
        image = _image(pid)  # an exec since is a new image, to be given the library too
        with self._lock:
            # one thread a process at a time, once an image (a --comm process is seen by
            # its exec and by its name; a process opens libcudart, then libcuda; the
            # open of an exec comes before its new image)
            busy = self._workers.get(pid)
            if image is None or (pid, image) in self._joined or (busy and busy.is_alive()):
                release()
                return
            self._workers[pid] = thread
            self._children = [t for t in self._children if t.is_alive()] + [thread]
            # started under the lock: a thread not started yet is not alive, and a second
            # caller would start another on the same process
            thread.start()

    def _child(self, pid: int, release: Callable[[], None]) -> None:
        why = ""
        self._began[pid] = time.monotonic()
        try:
            process = HeldProcess(pid)
        except ProcessLookupError:
            release()
            return
        try:
            why = self.injector.inject_held(
                process, self.libraries(),
                lambda mem, control: self._started(process, mem, control), release,
                self._stopping)
        except OSError as e:
            why = "it has exited" if e.errno == errno.ESRCH else str(e)
        except CudaprobeError as e:
            why = str(e)
        except Exception as e:  # noqa: BLE001 - bcc raises bare Exception: one line, trace on
            why = f"the safe-point probes failed: {str(e).splitlines()[0]}"
        finally:
            release()  # (once: a second call does nothing)
            with self._lock:  # the image it ran in by now: not tried again
                self._joined.add((pid, _image(pid)))
            if not any(i.process is process for i in self._done):
                process.close()
        if why == "it has exited":  # (counted, not said: a child's exit is said already)
            if self.on_refused is not None:
                self.on_refused(pid, why)
        elif why:
            self._refused(pid, why)

    def _attach(self, pid: int) -> str:
        try:
            process = HeldProcess(pid)
        except ProcessLookupError:
            return "it has exited"
        try:
            return self.injector.inject(
                process, lambda mem, control: self._started(process, mem, control))
        finally:
            if not any(i.process is process for i in self._done):
                process.close()

    def _started(self, process: HeldProcess, mem: ProcessMemory, control: int) -> str:
        """The control block read (checked), and the records' memfd taken."""
        L, pid = self.layout, process.pid
        library = [m for m in mappings(pid) if m.path == f"/memfd:{self.memfd_name} (deleted)"]
        if not process.alive():
            return "it has exited"
        block = read_control(mem, control, L, library)
        if isinstance(block, str):
            return block
        if block.state == L["ATTACH_REFUSED"]:
            return f"the GPU-time library in it said: {quoted(block.why)}"
        if block.owner != os.getpid() or block.state != L["ATTACH_RECORDING"]:
            return (f"its GPU-time library is recording for cudaprobe pid {block.owner} (or "
                    "one killed less than 5 s ago)")
        ours, why = take_memfd(process, block.fd, RECORDS_NAME, RECORDS_AT_START)
        if ours is None:
            return f"the descriptor its GPU-time library gave for its records is refused: {why}"
        with self._lock:
            self._done.append(Injected(pid, process, mem, control, ours))
        self.reader.add_file(ours, pid)
        if self._beats is None:
            self._beats = threading.Thread(target=self._heartbeat, daemon=True)
            self._beats.start()
        took = time.monotonic() - self._began.pop(pid, time.monotonic())
        self.notify(f"--gpu-time: the GPU-time library is recording in pid {pid} ({took:.2f} s "
                    "to put in)")
        if self.on_recording is not None:
            self.on_recording(pid)
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
                    self._write(i, "C_HEARTBEAT", struct.pack("<Q", beat))
                if self.keep:
                    self.reader.poll()
                self._free_read()

    def _read_word(self, i: Injected, field: str) -> int | None:
        """A u32 of the process's control block; None once it has exited."""
        try:
            return struct.unpack("<I", i.mem.read(i.control + self.layout[field], 4))[0]
        except (OSError, struct.error):
            return None

    def _write(self, i: Injected, field: str, value: bytes) -> None:
        """A word of the process's control block (inject.h's offset `field`)."""
        with contextlib.suppress(OSError):  # it exited: its records are in our memfd
            i.mem.write(i.control + self.layout[field], value)

    def _free_read(self) -> None:
        """Pages already read given back (under the lock)."""
        for i in self._done:
            done = self.reader.offset(i.records_fd) // 4096 * 4096
            if done:
                _libc.fallocate(i.records_fd, FALLOC_PUNCH_HOLE, 0, done)

    def ask_stop(self) -> None:
        """Each process told to stop recording, at once (the window is over),
        waited for by stop() later: the drain of the rows that follows may take
        seconds, and CUPTI would record on meanwhile."""
        if not self._stopped and self.reader is not None:
            self._tell_stop()

    def _tell_stop(self) -> list[Injected]:
        """The stop word written into each process recording; those processes."""
        with self._lock:
            injected = list(self._done)
        for i in injected:
            self._write(i, "C_STOP", struct.pack("<I", 1))
        return injected

    def stop(self) -> None:
        """Recording stopped in every process, what CUPTI held flushed."""
        if self._stopped or self.reader is None:
            return
        self._stopped = True
        self._stopping.set()
        if self._beats is not None:
            self._beats.join()
        with self._lock:
            children = self._children + self._node_workers
        deadline = time.monotonic() + CHILD_WAIT_S
        for child in children:  # an injection under way ends (a stub runs at most 30 s)
            child.join(max(0.0, deadline - time.monotonic()))
        L = self.layout
        injected = self._tell_stop()
        deadline = time.monotonic() + STOP_WAIT_S
        for i in injected:
            while time.monotonic() < deadline:
                state = self._read_word(i, "C_STATE")
                if state is None or state == L["ATTACH_STOPPED"]:  # (None: it has exited,
                    break  # its records are in our memfd)
                time.sleep(0.02)
            else:
                self.notify(f"--gpu-time: pid {i.pid} did not say it stopped recording within "
                            f"{STOP_WAIT_S:.0f} s: its last records may be missing")
            if self._read_word(i, "C_DETACHED") == L["DETACH_KEPT"]:
                self.notify(f"--gpu-time: CUPTI stays in pid {i.pid} after the stop (a libcupti "
                            "older than CUDA 12.6's is not taken out: finalizing it can crash a "
                            "program that uses CUDA graphs): its CUDA calls keep part of "
                            "CUPTI's cost until it exits")

    def poll(self) -> list[GpuWork]:
        """What the processes wrote since the last poll (serve: live)."""
        if self.reader is None:
            return []
        with self._lock:
            new = self.reader.poll()
            self._free_read()
            if not self.keep:
                self._retire()
        return new

    def _retire(self) -> None:
        """serve, which keeps nothing: the processes that have exited since, their
        records all read now, let go of (descriptors closed, nothing kept), and,
        each SWEEP_S, what was kept of processes tried and gone. Under the lock."""
        for i in [i for i in self._done if not i.process.alive()]:
            self._done.remove(i)
            self.reader.remove_file(i.records_fd)
            os.close(i.records_fd)
            i.mem.close()
            i.process.close()
            self._joined = {j for j in self._joined if j[0] != i.pid}
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._joined = {j for j in self._joined if os.path.exists(f"/proc/{j[0]}")}
            self._began = {p: t for p, t in self._began.items() if os.path.exists(f"/proc/{p}")}
            self._workers = {p: t for p, t in self._workers.items() if t.is_alive()}

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
                i.process.close()
            self._done.clear()
        if self.program is not None:
            self.program.close()



def _image(pid: int) -> tuple[int, int] | None:
    """What tells one program image of a process from the next (an exec): its
    executable's inode and where its stack starts (placed anew at each exec)."""
    try:
        ino = os.stat(f"/proc/{pid}/exe").st_ino
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
        fields = stat[stat.rindex(b")") + 2:].split()
        return ino, int(fields[25])  # startstack: field 28, the 26th after the name
    except (OSError, ValueError, IndexError):
        return None
