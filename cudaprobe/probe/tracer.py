"""The loaded BPF program and its parts, from load to cleanup; the one place
the bcc object lives.

`with Tracer(plan, settings) as t:` loads the program (load.py) and attaches
its probes (t.attacher, attach.py); t.ring (ringbuf.py) reads the records the
probes send, t.maps (maps.py) the counting maps, t.pairing (pairing.py) the
calls entered and not returned. Leaving the `with` detaches and cleans up.
"""

from __future__ import annotations

import contextlib
import mmap
import queue
import threading
from typing import Any, Callable

from cudaprobe.errors import CudaprobeError
from cudaprobe.probe import bpfprog, cleanup
from cudaprobe.probe.attach import Attacher
from cudaprobe.probe.autograd import AutogradProbe
from cudaprobe.probe.event import RECORD_STRUCTS
from cudaprobe.probe.load import load_program
from cudaprobe.probe.maps import MapReader
from cudaprobe.probe.pairing import PairingEntries
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.pyattach import PyStackProbe
from cudaprobe.probe.ringbuf import RingBuffer


class Tracer:
    """Owns the BPF object: `with Tracer(plan, settings) as t: t.attacher.start(); ...`.

    Entering compiles and attaches; no call is traced before attacher.start(),
    and none begins after attacher.detach() has begun, so that every function
    is traced over the same span.
    """

    def __init__(self, plan: ProbePlan, settings: bpfprog.Settings) -> None:
        self.plan = plan
        self.settings = settings
        self._bpf: Any = None
        self.attacher: Attacher
        self.maps: MapReader
        self.pairing: PairingEntries
        self.ring: RingBuffer | None = None  # none in stats mode: it aggregates in maps
        self.py: PyStackProbe | None = None  # --py-stacks: where the interpreters are
        self.autograd: AutogradProbe | None = None  # --py-stacks: PyTorch's backward pass
        self._finder: Finder | None = None  # on a node: see_python off the decoder's thread
        self.program_from = ""

    def __enter__(self) -> Tracer:
        self._bpf = load_program(self.plan, self.settings)
        # "cached": loaded from the cache (bpfcache.py), or "compiled" by bcc
        self.program_from = "cached" if getattr(self._bpf, "from_cache", False) else "compiled"
        self.attacher = Attacher(self._bpf, self.plan, self.settings)
        self.maps = MapReader(self._bpf, self.plan, self.settings.stats)
        self.pairing = PairingEntries(self._bpf, self.plan, self.settings)
        try:
            if self.settings.py_stacks and not self.settings.stats:
                self.py = PyStackProbe(self._bpf, hashes=self.settings.may_goto)
                self.autograd = AutogradProbe(self._bpf)
                self.attacher.on_target = self.see_python
                self.attacher.on_rescan = self.autograd.rescan
            self.attacher.attach_all()
            if not self.settings.stats:
                self.ring = RingBuffer(self._bpf["events"].map_fd,
                                       self.settings.ringbuf_pages * mmap.PAGESIZE,
                                       RECORD_STRUCTS)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def see_python(self, pid: int) -> None:
        """--py-stacks: a traced process's interpreter, and its libtorch (a target
        as it is added)."""
        assert self.py is not None and self.autograd is not None
        self.py.add_process(pid)
        self.autograd.add_process(pid)

    def see_python_on_node(self, pid: int) -> None:
        """see_python for a process found by its first call, on a node, where no
        rescan of targets forgets the processes gone: that is done here too. On a
        thread of its own (Finder): reading a process's maps and ELF symbols takes
        milliseconds to seconds, which the decoder, the caller, goes on meanwhile."""
        if self._finder is None:
            self._finder = Finder(self._see_python_found)
        self._finder.found(pid)

    def _see_python_found(self, pid: int) -> None:
        assert self.autograd is not None
        self.autograd.forget_exited()
        self.see_python(pid)

    def close(self) -> None:
        """Detach everything and clean up; safe to call twice."""
        if self._bpf is None:
            return
        if self._finder is not None:  # before what it adds to goes
            self._finder.close()
            self._finder = None
        if self.autograd is not None:
            self.autograd.close()
        self.attacher.close()
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        bpf, self._bpf = self._bpf, None
        # the tracepoints' perf events: the kernel waits for grace periods as each
        # is closed, under one lock (~0.1 s each), which bcc's cleanup would do one
        # by one before cudaprobe could exit; a child process closes them instead
        tracepoints = list(bpf.tracepoint_fds.values())
        if tracepoints and cleanup.close_in_background(tracepoints):
            bpf.tracepoint_fds.clear()
        with contextlib.suppress(Exception):
            bpf.cleanup()

    def counters(self) -> dict[str, int]:
        """The losses counted in the kernel, and the records the ring held that
        no layout fits (malformed)."""
        return {**self.maps.counters(), "malformed": self.ring.malformed if self.ring else 0}


class Finder:
    """Processes found by their first call, each seen by `see` on one thread of its
    own, in the order found: `found(pid)` returns at once."""

    JOIN_S = 5.0  # close(): the longest a process being read holds the cleanup up

    def __init__(self, see: Callable[[int], None]) -> None:
        self._see = see
        self._pids: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="cudaprobe-find", daemon=True)
        self._thread.start()

    def found(self, pid: int) -> None:
        self._pids.put(pid)

    def _run(self) -> None:
        while (pid := self._pids.get()) is not None:
            with contextlib.suppress(CudaprobeError, OSError):  # gone, or no Python of its own
                self._see(pid)

    def close(self) -> None:
        """What was found and not yet seen is dropped; the one being seen ends."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._pids.get_nowait()
        self._pids.put(None)
        self._thread.join(self.JOIN_S)
