"""--py-stacks and PyTorch's backward pass: the autograd probes (docs/pystacks.md).

A backward kernel is launched by one of autograd's threads, while it
evaluates a node that a forward op made. PyTorch numbers each node as it is
made (at::sequence_number::get_and_increment, the number torch.profiler
links forward and backward ops by), and Engine::evaluate_function is given
the node to run. With the probes of bpf/pystacks.bpf.h on those functions, a
forward op's node comes with the stack of the line that made it, and each
call of the backward pass says the node it is the work of; the decoder
(decode/pystacks.py) joins them.

The probes go into each traced process that maps libtorch, by links given
its pid (a process outside the trace takes no trap), as soon as a rescan
finds libtorch in its maps. Where a Node keeps its number depends on the
version (a std::shared_ptr or a c10::intrusive_ptr holds a node): told by the
symbols libtorch exports. A libtorch whose symbols are not those is said in
one line, and its backward calls keep the stack they had (a borrowed one).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from cudaprobe.errors import CudaprobeError
from cudaprobe.probe import uprobe_multi
from cudaprobe.probe.load import retry_interrupted
from cudaprobe.targets import procmaps
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.openfile import OpenedFile

LIBTORCH = re.compile(r"/libtorch(_cpu)?\.so[^/]*$")
NODE_MADE = "_ZN2at15sequence_number17get_and_incrementEv"
# Engine::evaluate_function(std::shared_ptr<GraphTask>&, Node*, ...): the node is
# the third argument, `this` the first
EVALUATE = ("_ZN5torch8autograd6Engine17evaluate_function"
            "ERSt10shared_ptrINS0_9GraphTaskEEPNS0_4NodeE")
# where a thread that evaluated a node is after it (called where evaluate_function was)
GRAPH_DONE = "_ZN5torch8autograd9GraphTask41mark_as_completed_and_run_post_processingEv"
EXCEPTION = "_ZN5torch8autograd6Engine19thread_on_exception"
# a constructor taking a node handle tells which handle a version has, and so
# where a Node's fields are: (sequence_nr_, thread_id_) after the vtable pointer
# and the handle's base (a refcount, 8 bytes; or enable_shared_from_this, 16)
COPY_SLICES = "_ZN5torch8autograd10CopySlicesC"
LAYOUTS = {"13intrusive_ptrINS0_4NodeE": (16, 40), "10shared_ptrINS0_4NodeE": (24, 48)}


@dataclass(frozen=True)
class AutogradPlan:
    """Where the probes go in one libtorch file."""
    file: OpenedFile
    made: int  # file offsets
    evaluate: int
    leave: tuple[int, ...]
    seq_off: int
    thread_off: int


def plan_for(file: OpenedFile) -> AutogradPlan | str:
    """The probes' places in `file`, or why there are none."""
    functions = read_symbols(file).functions
    def first(prefix: str) -> int | None:
        return next((at for name, at in functions.items()
                     if name.startswith(prefix) and not name.endswith(".cold")), None)
    made, evaluate = functions.get(NODE_MADE), first(EVALUATE)
    leave = tuple(at for at in (functions.get(GRAPH_DONE), first(EXCEPTION)) if at is not None)
    if made is None or evaluate is None or len(leave) < 2:
        return "it does not define the autograd functions cudaprobe probes"
    layout = next((LAYOUTS[handle] for name in functions if name.startswith(COPY_SLICES)
                   for handle in LAYOUTS if handle in name), None)
    if layout is None:
        return "its autograd nodes are of a layout cudaprobe does not know"
    return AutogradPlan(file, made, evaluate, leave, *layout)


class AutogradProbe:
    """The autograd probes of a loaded --py-stacks program, per traced process."""

    def __init__(self, bpf: Any, notify: Callable[[str], None] = print) -> None:
        self._bpf = bpf
        self.notify = notify
        self._plans: dict[tuple[int, int], AutogradPlan | str] = {}  # by file identity
        self._links: dict[int, list[int]] = {}  # pid -> its link fds
        self._planned: dict[int, AutogradPlan] = {}  # pid -> where its probes go
        self._paused = False  # serve --duty: between two slices, no link in
        self._closed = False  # close(): a process read after it (a node's Finder) gets none
        self._pages: dict[int, int] = {}  # pid -> its size when its maps were read
        self._said: set[str] = set()
        self._fds: dict[bytes, int] = {}
        # add_process comes from the open gate's thread too (a child linked at its
        # open), rescan from the trace loop: a process is probed once
        self._lock = threading.Lock()

    def add_process(self, pid: int) -> None:
        """A traced process: probed now if it maps libtorch, else looked at again
        at the rescans (`import torch` comes after the start)."""
        self.rescan([pid], forget=False)

    def rescan(self, pids: list[int], forget: bool = True) -> None:
        """The traced processes now: those not probed yet are looked at where
        their size changed (a statm read; maps only then); with `forget`, the
        links of those gone are closed."""
        with self._lock:
            self._rescan(pids, forget)

    def _rescan(self, pids: list[int], forget: bool) -> None:
        if self._closed:
            return
        for pid in pids:
            if pid in self._planned:  # (its links, if any, are of that plan)
                continue
            with contextlib.suppress(CudaprobeError, OSError):
                pages = procmaps.vm_pages(pid)
                if self._pages.get(pid) != pages:
                    self._pages[pid] = pages
                    self._look(pid)
        if forget:
            alive = set(pids)
            for pid in [p for p in self._links if p not in alive]:
                self._forget(pid)
            for pid in [p for p in self._pages if p not in alive]:
                del self._pages[pid]

    def _look(self, pid: int) -> None:
        if not any(LIBTORCH.search(line.path) for line in procmaps.map_lines(pid)):
            return
        for mapped in procmaps.read_maps(pid):
            if not LIBTORCH.search(mapped.path):
                continue
            plan = self._plans.get(mapped.identity)
            if plan is None:
                try:
                    plan = self._plans[mapped.identity] = plan_for(mapped.open())
                except CudaprobeError as e:
                    plan = self._plans[mapped.identity] = str(e)
            if isinstance(plan, str):
                self._say(mapped.host_path, plan)
                continue
            self._attach(pid, plan)
            return

    def _say(self, path: str, why: str) -> None:
        if path not in self._said:
            self._said.add(path)
            self.notify(f"--py-stacks: {path}: {why}: backward calls are not given their "
                        f"forward line")

    def _fd(self, name: bytes) -> int:
        if name not in self._fds:
            fn = retry_interrupted(lambda: self._bpf.load_func(
                name, self._bpf.KPROBE, attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI))
            self._fds[name] = fn.fd
        return self._fds[name]

    def _attach(self, pid: int, plan: AutogradPlan, again: bool = False) -> None:
        """Its node's fields into `ag_procs`, then the links, the pid given
        (`again`: put back after a pause, nothing said)."""
        if not uprobe_multi.supported():
            self._say(plan.file.name, "the probes need Linux 6.6 or later (uprobe_multi)")
            return
        self._planned[pid] = plan
        procs = self._bpf["ag_procs"]
        procs[procs.Key(pid)] = procs.Leaf(plan.seq_off, plan.thread_off)
        if self._paused:
            return  # its links go in at the next resume()
        links: list[int] = []
        self._links[pid] = links
        path = plan.file.proc_path
        try:
            for name, offsets, ret in ((b"cp_ag_leave", plan.leave, False),
                                       (b"cp_ag_enter", (plan.evaluate,), False),
                                       (b"cp_ag_made", (plan.made,), True)):
                links.append(uprobe_multi.create_link(self._fd(name), path, list(offsets),
                                                      [0] * len(offsets), ret, pid))
            if not again:
                self.notify(f"--py-stacks: pid {pid}: PyTorch's autograd probed: its "
                            f"backward calls are given the line of their forward op from now on")
        except OSError as e:
            self._forget(pid)
            if e.errno != errno.ESRCH:  # gone meanwhile: nothing to say
                self._say(plan.file.name, f"the probes could not be attached ({e.strerror})")
        except Exception as e:  # bcc's load of the probes' programs
            self._forget(pid)
            self._say(plan.file.name, f"the probes could not be loaded ({e})")

    def _close_links(self, pid: int) -> None:
        for fd in self._links.pop(pid, []):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _forget(self, pid: int) -> None:
        self._close_links(pid)
        self._planned.pop(pid, None)
        procs = self._bpf["ag_procs"]
        with contextlib.suppress(KeyError):
            del procs[procs.Key(pid)]

    def pause(self) -> None:
        """serve --duty, between slices: every link off (each process's place kept)."""
        with self._lock:
            self._paused = True
            for pid in list(self._links):
                self._close_links(pid)

    def resume(self) -> None:
        """A slice begins: the links of the processes still running back in."""
        with self._lock:
            self._paused = False
            for pid, plan in list(self._planned.items() if not self._closed else ()):
                if not procmaps.process_alive(pid):
                    self._forget(pid)
                elif pid not in self._links:
                    self._attach(pid, plan, again=True)

    def forget_exited(self) -> None:
        """On a node, where no rescan comes (the processes are found by their
        calls): the links of processes gone closed."""
        with self._lock:
            for pid in [p for p in self._planned if not procmaps.process_alive(p)]:
                self._forget(pid)

    @property
    def processes(self) -> int:
        """Processes probed now."""
        return len(self._links)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for pid in list(self._links):
                self._forget(pid)

