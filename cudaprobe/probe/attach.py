"""Attaching and detaching the probes, and which processes they trace.

Three ways of attaching: a uprobe_multi link per library (one for the entry
probes, one for the returns), such links per target process
(Settings.links_per_process), or a perf event per probe (Linux < 6.6). Each
library is given to the kernel as /proc/self/fd/N of the descriptor it was
read through (openfile.py), never by the name a traced process could
re-point; the attachments hold the descriptor open as long as they are kept. The
`phase` map makes the start and the stop of tracing one instant for every
function, however long attaching and detaching them one by one take; the
`targets` map says which processes are traced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import signal
import threading
import time
from typing import Any, Callable

from cudaprobe.errors import BpfError, CudaprobeError, ProcessGone
from cudaprobe.probe import bpfprog, bpfsys, cleanup, perf_uprobe, uprobe_multi
from cudaprobe.probe.event import STOPPED, STOPPING, TARGET_TRACED, TRACING
from cudaprobe.probe.forkhold import SEIZE_WAIT_S, ForkHold
from cudaprobe.probe.load import retry_interrupted
from cudaprobe.probe.opengate import GateUnavailable, Hand, OpenGate
from cudaprobe.probe.plan import Attachment, ProbePlan
from cudaprobe.probe.seizer import Seizer, Told
from cudaprobe.targets.openfile import OpenedFile, proc_base
from cudaprobe.targets.procmaps import (
    map_lines,
    process_age_s,
    process_alive,
    process_name,
    shares_memory,
    thread_group,
    threads_gone,
)

# EINVAL at attach: almost always another tracer's uprobe at the same address
# with a different reference-counter offset (see perf_uprobe.py)
REF_CTR_HINT = ("if dmesg says 'ref_ctr_offset mismatch', another tracer (a bcc Python tool) "
                "holds uprobes on these functions: stop it and retry")
# at the end, between the stop of new calls and the stop of returns: for the
# calls under way to return, and so to be whole in the trace
STOP_GRACE_S = 0.01
HOLD_LOOKS = 50  # looks (polls) a process mapping a probed library is tried for a fork hold
MAX_FORK_HOLD_MS = 2000.0  # CUDAPROBE_FORK_HOLD_MS's most
SEIZER_LOOKS = 3  # looks a child the seizer has is left to it (its record lost?)
GONE_KEPT = 4096  # processes gone that mapped a probed library, kept for their children


class LinkCloser:
    """Closes the links of processes that have exited, on threads of its own.

    The kernel waits for a grace period as it takes a uprobe_multi link's
    probes out (tens of milliseconds a link): closed one by one on the trace
    loop, a loop of short processes would stall the reading of events and
    keep the links of hundreds of dead processes, which every later mapping
    of the library walks. Waits on several threads share grace periods: a
    DataLoader forking 4 workers an epoch from a PyTorch process leaves about
    130 links a second to close (its five CUDA libraries, two links each),
    more than 4 threads closed at a grace period each."""

    THREADS = 16

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def close(self, fds: list[int]) -> None:
        if not self._threads:
            self._threads = [threading.Thread(target=self._serve, name="cudaprobe-unlink",
                                              daemon=True) for _ in range(self.THREADS)]
            for t in self._threads:
                t.start()
        for fd in fds:
            self._queue.put(fd)

    def take_pending(self) -> list[int]:
        """The links not closed yet, taken from the queue: at the end they go to
        the background closer with the others. Left queued, each would keep the
        process from exiting for its grace period (the kernel closes what a
        process leaves open one by one as it exits: seconds, after a forking
        loop's workers)."""
        fds: list[int] = []
        with contextlib.suppress(queue.Empty):
            while True:
                fds.append(self._queue.get_nowait())
        return fds

    def _serve(self) -> None:
        while True:
            fd = self._queue.get()
            with contextlib.suppress(OSError):
                os.close(fd)


def fork_hold_ms() -> float:
    """CUDAPROBE_FORK_HOLD_MS: how long a child forked without exec may wait in
    the kernel to be seized (forkhold.py); 0: no fork holds."""
    text = os.environ.get("CUDAPROBE_FORK_HOLD_MS", "")
    try:
        value = float(text) if text else SEIZE_WAIT_S * 1e3
    except ValueError:
        value = SEIZE_WAIT_S * 1e3
    return min(max(value, 0.0), MAX_FORK_HOLD_MS)


class Attacher:
    """The probes of one loaded program: attach_all() at load, attach_library()
    later; start() and detach() the instants tracing begins and ends."""

    def __init__(self, bpf: Any, plan: ProbePlan, settings: bpfprog.Settings) -> None:
        self._bpf = bpf
        self.plan = plan
        self.settings = settings
        self.attached: list[str] = []  # library paths probed, as users are shown them
        self.attach_seconds = 0.0
        self._links: list[int] = []  # uprobe_multi link fds
        # serve --duty: the links of Settings.duty_exact's functions, never paused
        self._kept_links: list[int] = []
        # library-wide links (no links per process): each library's attachments,
        # for resume(); and whether they are off (pause(): serve --duty)
        self._wide: dict[tuple[int, int], list[Attachment]] = {}
        self._paused = False
        # per-process links (Settings.links_per_process): the libraries probed,
        # and each target process's links on them
        self._libraries: dict[tuple[int, int], list[Attachment]] = {}  # by file identity
        self._pid_links: dict[int, list[int]] = {}
        self._slots: dict[tuple[int, int], int] = {}  # file identity -> `library_ready` slot
        self._phase = 0  # event.ATTACHING: what the `phase` map holds
        self.on_target: Callable[[int], None] | None = None  # told of each target (--py-stacks)
        # told the targets at each rescan of their maps (--py-stacks: libtorch loaded later)
        self.on_rescan: Callable[[list[int]], None] | None = None
        # a process held at its open, linked: may take the open over (--gpu-time, opengate.py)
        self.on_held: Callable[[int], Hand | None] | None = None
        # a process of the traced tree held at its exec of a file, given (pid, the file's
        # descriptor): probes it, if it has CUDA linked in, and links the process (follow.py)
        self.on_exec: Callable[[int, int], None] | None = None
        self.exec_filesystems = 0  # file systems whose execs the gate holds
        # a child is linked as it opens a probed library (opengate.py), from the
        # gate's thread: links and `targets` are changed under this lock
        self._lock = threading.RLock()
        self.gate: OpenGate | None = None
        self.gate_unavailable = ""  # why there is no gate, where there is none
        self.notify: Callable[[str], None] = lambda _line: None  # said to the user (follow.py)
        # processes the gate linked, to be told: (pid, its name then: it may be gone by then)
        # and whether it mapped a probed library already (a fork without exec: its
        # calls since its fork were not seen)
        self._linked_at_open: list[tuple[int, str, bool]] = []
        self._comm = b""  # --comm's name, as the kernel keeps it (15 bytes)
        self.processes: set[int] = set()  # every process given links, for the summary
        self._said_leaderless: set[int] = set()
        self._closer = LinkCloser()
        # child processes told at their making (seizer.py): the seizer; processes
        # known to map a probed library (their children share their mappings); the
        # children linked at their fork, to be told by follow_children(); and those
        # of a process mapping one gone before their links were in: (pid, parent)
        self._forks: Seizer | None = None
        self._mapping: set[int] = set()
        # those gone, the latest GONE_KEPT: a child's record may come after its
        # parent is gone (the linker behind a burst), and must still be said
        self._mapped_gone: dict[int, None] = {}
        self._forked: list[int] = []
        self.unprobed: list[tuple[int, int]] = []
        self.fork_parent: dict[int, int] = {}  # a child linked at its making -> its parent
        # the processes mapping a probed library hold their forks' children in fork
        # until their links are in (forkhold.py); those wanting a hold still (no
        # glibc mapped yet: a program held at its first open, by ld.so)
        self._holds: ForkHold | None = None
        self._hold_wanted: dict[int, int] = {}  # pid -> looks left
        # children seized in their hold by the seizer (their tracer), linked on the
        # linker thread, then let go by the seizer: child -> Told
        self._seized: dict[int, Told] = {}
        self._to_link: queue.SimpleQueue[tuple[int, int, int, Told | None] | None] = \
            queue.SimpleQueue()
        self._linker: threading.Thread | None = None
        self._late_looks: dict[int, int] = {}  # a child with its key at a look -> looks
        # children made by vfork, left to the gate at their exec: child -> parent
        self._vforked: dict[int, int] = {}
        self.link_age: dict[int, float] = {}  # a process linked -> its age then (seconds)

    def attach_all(self) -> None:
        """The plan's probes: their settings into the `probes` map, then attached."""
        start = time.monotonic()
        probes = self._bpf["probes"]
        for p in self.plan.probes:
            probes[probes.Key(p.func_id)] = probes.Leaf(
                *bpfprog.probe_config(p, self.settings.kept(p)))
        by_file: dict[tuple[int, int], list[Attachment]] = {}
        for a in self.plan.attachments:
            by_file.setdefault(a.file.identity, []).append(a)
        for atts in by_file.values():
            self.attach_library(atts)
        self.attach_seconds = time.monotonic() - start

    def attach_library(self, attachments: list[Attachment]) -> None:
        """Probe `attachments`, all in one file: at start, or later while tracing.

        Their probe ids must be in the plan, whose `probes` map was filled at
        load time. Return probes go in first: a call entered between the two
        attaches then has no entry to pair with, rather than an entry that
        never completes and shows as in flight forever. With uprobe_multi
        links the library's calls count once all its links are in (its
        `library_ready` slot), every function at once.
        """
        if self.settings.attach == "multi":
            self._attach_links(attachments)
        else:
            self._attach_perf(attachments)
        self.attached.append(attachments[0].path)

    def _attach_links(self, attachments: list[Attachment]) -> None:
        """uprobe_multi links on their file: one pair per library, or a pair per
        target process; then the library's `library_ready` slot is set."""
        file = attachments[0].file
        slot = self._slots.setdefault(file.identity, len(self._slots))
        if slot >= self.settings.max_libraries:
            raise BpfError(f"attaching uprobes to {file.name}", f"more than "
                           f"{self.settings.max_libraries} libraries in one session")
        if self.settings.links_per_process:
            with self._lock:
                self._libraries[file.identity] = attachments
                for pid in list(self._pid_links):
                    self._attach_process(pid, {file.identity: attachments})
            if self.gate is not None:
                with contextlib.suppress(GateUnavailable):  # its children: linked at a poll
                    self.gate.watch(file.fd, file.identity)
        else:
            kept, cycled = self._split_kept(attachments)
            with self._lock:
                self._wide[file.identity] = cycled
                if kept:
                    self._kept_links += self._attach_multi(kept)
                if cycled and not self._paused:
                    self._links += self._attach_multi(cycled)
        ready = self._bpf["library_ready"]
        ready[ready.Key(slot)] = ready.Leaf(1)

    def _split_kept(self, attachments: list[Attachment]
                    ) -> tuple[list[Attachment], list[Attachment]]:
        """(those of Settings.duty_exact's functions, the rest): the first on always."""
        kept = [a for a in attachments if self.settings.kept(a.probe)]
        return kept, [a for a in attachments if not self.settings.kept(a.probe)]

    def _attach_process(self, pid: int, libraries: dict[tuple[int, int], list[Attachment]],
                        newborn: bool = False) -> None:
        """Links for one target process on `libraries`; a process gone meanwhile
        (ESRCH) gets none, quietly: its exit is reported by whoever follows it."""
        links = self._pid_links.setdefault(pid, [])
        self.processes.add(pid)
        # a process whose main thread has exited (pthread_exit): the kernel finds its
        # memory through that thread, and a link given its pid puts no breakpoint in
        # it; links on the whole library instead (the `targets` map keeps the
        # calls to its own), said once. A child just made (`newborn`) has its own.
        whole = not newborn and proc_base(pid) != f"/proc/{pid}"
        if whole and pid not in self._said_leaderless:
            self._said_leaderless.add(pid)
            self.notify(f"pid {pid}: its main thread has exited (pthread_exit), and the kernel "
                        "puts no per-process probe in such a process: its libraries are probed "
                        "for every process while it runs (others mapping them take a trap, "
                        "and are not traced)")
        for atts in libraries.values():
            try:
                links += self._attach_multi(atts, 0 if whole else pid)
            except ProcessGone:
                return

    def _attach_multi(self, atts: list[Attachment], pid: int = 0) -> list[int]:
        """[the return probes' link, the entry probes' link] (detach() counts on
        the pairs)."""
        links = []
        file = atts[0].file
        try:
            for fn_name, retprobe in ((b"cp_return", True), (b"cp_enter", False)):
                try:  # bcc loads each program once and hands the same one back after
                    fn = retry_interrupted(lambda name=fn_name: self._bpf.load_func(
                        name, self._bpf.KPROBE, attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI))
                except Exception as e:
                    raise BpfError("loading the BPF program failed", str(e)) from None
                try:
                    slot = self._slots[file.identity] << 32  # cp_enter's library_ready slot
                    links.append(uprobe_multi.create_link(
                        fn.fd, file.proc_path, [a.offset for a in atts],
                        [slot | a.probe.func_id for a in atts], retprobe, pid))
                except OSError as e:
                    if e.errno == errno.ESRCH:
                        raise ProcessGone(pid, "exited") from None
                    fix = REF_CTR_HINT if e.errno == errno.EINVAL else (
                        "set CUDAPROBE_ATTACH=perf on kernels without uprobe_multi")
                    raise BpfError(f"attaching {len(atts)} uprobes to {file.name}", e.strerror,
                                   fix=fix) from None
        except (BpfError, ProcessGone):
            for fd in links:
                os.close(fd)
            raise
        return links

    def _attach_perf(self, atts: list[Attachment]) -> None:
        for a in atts:
            addr = a.offset if a.is_pie_or_shared else a.vaddr
            for kind, fn in (("uretprobe", f"cp_return_{a.probe.func_id}"),
                             ("uprobe", f"cp_enter_{a.probe.func_id}")):
                try:
                    perf_uprobe.attach(self._bpf, fn, a.file.proc_path, addr,
                                       kind == "uretprobe")
                except OSError as e:
                    raise BpfError(f"attaching {kind} to {a.probe.symbol} in {a.path}",
                                   e.strerror, fix=REF_CTR_HINT) from None

    def add_target(self, pid: int) -> None:
        """Trace this process (and, through the fork tracepoint, its children)."""
        with self._lock:
            targets = self._bpf["targets"]
            targets[targets.Key(pid)] = targets.Leaf(TARGET_TRACED)
            if self.on_target is not None:
                self.on_target(pid)
            if self.settings.links_per_process and pid not in self._pid_links:
                self._attach_process(pid, self._libraries)
                with contextlib.suppress(CudaprobeError):
                    if self._maps_probed(pid):  # (so do its children, forked)
                        self._mapping.add(pid)
                        self._hold(pid)

    def add_named(self, pid: int) -> bool | None:
        """A process of the --comm name found by a scan of names, made a target:
        None where it was linked already (held at its exec or open: said there);
        else linked now, and whether it mapped a probed library before (its calls
        before then were not seen)."""
        with self._lock:
            if pid in self._pid_links or not self.settings.links_per_process:
                self.add_target(pid)
                return None
            try:
                late = self._maps_probed(pid)
            except CudaprobeError:
                late = False
            self.add_target(pid)
            return late

    def _link(self, pid: int, made: int = 0, linked: Callable[[], None] | None = None) -> None:
        """A child's own links, then its calls count: from the moment every link
        is in, all functions at once (the fork tracepoint adds it as
        TARGET_LINKING; so does the exec tracepoint for --comm). `made`: when
        a child linked at its making was forked (CLOCK_MONOTONIC ns). For such
        a child nothing before its calls count reads a file. `linked`: called
        then, before anything else is read of it."""
        self._attach_process(pid, self._libraries, newborn=made > 0)
        # its calls count from here, before anything else is read of it (a key gone
        # meanwhile is not added back)
        bpfsys.u32_key_replace(self._bpf["targets"].map_fd, pid, bytes([TARGET_TRACED]))
        if linked is not None:
            linked()
        if made:  # just forked: the span it ran unlinked, to the nanosecond
            self.link_age[pid] = max(0, time.monotonic_ns() - made) / 1e9
        else:
            with contextlib.suppress(CudaprobeError):  # how long it ran unlinked, at most
                self.link_age[pid] = process_age_s(pid)
        if self.on_target is not None:  # (--py-stacks: its interpreter, from its maps)
            with contextlib.suppress(CudaprobeError, OSError):
                self.on_target(pid)

    def _link_at_open(self, pid: int) -> Hand | None:
        """The gate holds `pid` at its open of a probed library: a process of the
        traced tree is linked before the library is mapped (opengate.py); then
        `on_held` may take the open over."""
        bpf = self._bpf
        if bpf is None or self._phase != TRACING:
            return None
        targets = bpf["targets"]
        try:  # without the lock: another process's open never waits on our work
            targets[targets.Key(pid)]
        except KeyError:
            return None  # not of the traced tree: its open goes on at once
        with self._lock:
            if self._bpf is None or self._phase != TRACING:
                return None
            self._mapping.add(pid)  # it maps the library once its open goes on
            self._hold(pid)  # (glibc mapped after the library: at a later look)
            if pid in self._pid_links:  # linked: its new image, after an exec, may want it
                return self.on_held(pid) if self.on_held is not None else None
            try:
                late = self._maps_probed(pid)
            except CudaprobeError:
                late = False
            self._link(pid)
            try:
                name = process_name(pid)
            except CudaprobeError:
                name = "exited"
            self._linked_at_open.append((pid, name, late))
        return self.on_held(pid) if self.on_held is not None else None

    def _exec_at_gate(self, pid: int, fd: int) -> Hand | None:
        """The gate holds `pid` at its exec of a file: for a process of the traced
        tree, on_exec probes the file if it is a program with CUDA linked in (and
        not probed yet) and links the process, before it runs; then on_held, as
        at an open (its new image may want the GPU-time library), once the exec
        is let go."""
        bpf = self._bpf
        if bpf is None or self._phase != TRACING or self.on_exec is None:
            return None
        targets = bpf["targets"]
        try:  # without the lock: another process's exec never waits on our work
            targets[targets.Key(pid)]
        except KeyError:
            if not self._execs_under_comm(fd):
                return None
            self.add_target(pid)  # (the exec tracepoint would, once it has the name)
            with self._lock:  # told as a process that started under the name
                self._linked_at_open.append((pid, self._comm.decode(errors="replace"), False))
        self.on_exec(pid, fd)
        with self._lock:
            linked = pid in self._pid_links
        hand = self.on_held(pid) if linked and self.on_held is not None else None
        if hand is None:
            return None
        # the exec goes on first: the gate also holds the exec's open of its ELF
        # interpreter, which comes with the exec's credentials lock held, and a
        # ptrace attach waits on that lock (the open would wait on the attach). The
        # library goes in once the new image runs, at its first CUDA call (its safe
        # point), as into a fork.
        return lambda release: (release(), hand(lambda: None))

    def _execs_under_comm(self, fd: int) -> bool:
        """The file being exec'd gives the process the --comm name (its name is
        the file's, cut to 15 bytes; a symbolic link's own name is not seen here)."""
        if not self._comm:
            return False
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return os.fsencode(os.path.basename(path))[:15] == self._comm

    def probed_files(self) -> list[OpenedFile]:
        """Each file probed, opened (by descriptor)."""
        with self._lock:
            return [atts[0].file for atts in self._libraries.values() if atts]

    def take_linked_at_open(self) -> list[tuple[int, str, bool]]:
        """The processes the gate linked since the last call."""
        with self._lock:
            pids, self._linked_at_open = self._linked_at_open, []
        return pids

    def link_target(self, pid: int) -> None:
        """Links now for a target not linked yet: one that mapped a library found
        later (follow.py), which the gate never held for."""
        with self._lock:
            if self.settings.links_per_process and pid not in self._pid_links:
                self._link(pid)
            if self.settings.links_per_process:  # it maps one (or is one): its forks held
                self._mapping.add(pid)
                self._hold(pid)

    def _maps_probed(self, pid: int) -> bool:
        """`pid` maps one of the probed libraries: by inode alone (maps may print
        another device than stat gives: a btrfs subvolume's, an overlay's; one
        inode number on two devices links a child early, which is harmless)."""
        inodes = {ino for _dev, ino in self._libraries}
        return any(m.inode in inodes for m in map_lines(pid))

    def follow_children(self) -> list[int]:
        """Links for the children the fork tracepoint added since the last look
        that map a probed library already: a fork without exec shares its
        parent's mappings and opens nothing, so the gate never held it; its calls
        before now are not seen. Without a gate, every child, here. Thread ids
        (the tracepoint sees every clone) are taken out. Returns the processes
        linked (docs/attach.md)."""
        if not self.settings.links_per_process:
            return []
        with self._lock:
            linked, self._forked = self._forked, []  # linked at their making (link_forked)
            for pid in list(self._hold_wanted):
                self._hold(pid)
            if self._holds is not None:  # a hold on the glibc it was to map: that one?
                replaced = [self._holds.check(pid) for pid in self._holds.unsure()]
                self._closer.close([fd for fd in replaced if fd is not None])
            targets = self._bpf["targets"]
            for pid in self.target_pids():
                if pid in self._pid_links or pid in self._seized:  # (seized: linked soon)
                    continue
                if pid in self._vforked:  # its parent's memory still, until it execs
                    if shares_memory(pid, self._vforked[pid]):
                        continue
                    del self._vforked[pid]
                try:
                    if thread_group(pid) != pid:  # a thread of a target
                        with contextlib.suppress(KeyError):
                            del targets[targets.Key(pid)]
                        continue
                    if self.gate is not None and not self._maps_probed(pid):
                        continue  # linked as it opens one, if it ever does
                except CudaprobeError:
                    continue  # gone: the next rescan takes it out
                if self._holds is not None and self._holds.waiting(pid) and \
                        self._late_looks.get(pid, 0) < SEIZER_LOOKS:
                    self._late_looks[pid] = self._late_looks.get(pid, 0) + 1
                    continue  # the seizer has it (unless its record was lost)
                self._late_looks.pop(pid, None)
                if self.gate is not None:  # it maps one (and so will its children)
                    self._mapping.add(pid)
                    self._hold(pid)
                self._link(pid)
                if self._release(pid):  # held in its fork until now: traced from its
                    self.link_age.pop(pid, None)  # first call
                    continue
                linked.append(pid)
        return linked

    def link_forked(self, child: int, parent: int, made: int = 0,
                    seized: Told | None = None) -> None:
        """A child process of a linked process, just made (seizer.py, on the
        linker thread; `made`: when, in CLOCK_MONOTONIC nanoseconds). One whose parent
        maps a probed library shares its mappings (a fork without exec): linked
        at once, given a hold for its own forks (forkhold.py). `seized` in its
        hold (stopped before its first instruction after fork, until let go),
        it is traced from its first call; else it is said as linked late, with its
        span since its fork, by follow_children's caller, or, gone before (or
        the trace over), kept in `unprobed` to be said. Where there is no
        gate, every child is linked here, as follow_children() would at its
        next look. Any other is left to the gate, which holds it at its open
        of a probed library. Every child's key is let go here, whatever comes."""
        held = False
        try:
            with self._lock:
                mapping = parent in self._mapping or parent in self._mapped_gone
                if mapping:  # it shares them (and so will its own children)
                    self._mapping.add(child)
                if self._bpf is None or child in self._pid_links:
                    return
                if not mapping and self.gate is not None:
                    return
                if self._phase == TRACING and bpfsys.u32_key_lookup(
                        self._bpf["targets"].map_fd, child, 1) is not None:
                    def let_go() -> None:  # its calls count, its own forks held (the kernel
                        nonlocal held  # gave it its parent's hold, from its first thread)
                        if mapping:
                            self._hold(child)
                        held = seized is not None and seized.held
                    try:
                        self._link(child, made, linked=let_go)
                        self.fork_parent[child] = parent
                        if held:  # traced from its first call
                            self.link_age.pop(child, None)
                        else:
                            self._forked.append(child)
                        return
                    except CudaprobeError:
                        pass  # gone already
                if mapping:
                    self.unprobed.append((child, parent))
        finally:
            self._release(child)

    def _hold(self, pid: int) -> None:
        """A hold on `pid`'s forks (forkhold.py), or, none to be had yet (no
        glibc mapped), wanted at the next look."""
        holds = self._holds
        if holds is None or holds.has(pid):
            return
        looks = self._hold_wanted.pop(pid, HOLD_LOOKS)
        if not holds.add(pid) and looks > 1 and process_alive(pid):
            self._hold_wanted[pid] = looks - 1

    def _release(self, child: int) -> bool:
        """`child` let go of its fork: True where it was held until now
        (ForkHold.release)."""
        holds = self._holds
        return holds.release(child) if holds is not None else False

    def take_forked(self) -> list[int]:
        """The children linked at their making not told yet (the trace's end)."""
        with self._lock:
            forked, self._forked = self._forked, []
        return forked

    def take_unprobed(self) -> list[tuple[int, int]]:
        """The children gone before their links were in, not told yet: (pid, parent)."""
        with self._lock:
            gone, self.unprobed = self.unprobed, []
        return gone

    def remove_target(self, pid: int) -> None:
        """A process gone: out of `targets`, and its links closed on the closer
        threads (LinkCloser)."""
        with self._lock:
            targets = self._bpf["targets"]
            with contextlib.suppress(KeyError):
                del targets[targets.Key(pid)]
            links = self._pid_links.pop(pid, [])
            # what is kept of it: a gone process makes no more children (its age
            # when linked stays until a child linked at its making is told)
            if pid in self._mapping:
                self._mapping.discard(pid)
                if len(self._mapped_gone) >= GONE_KEPT:
                    del self._mapped_gone[next(iter(self._mapped_gone))]
                self._mapped_gone[pid] = None
            self._hold_wanted.pop(pid, None)
            self._late_looks.pop(pid, None)
            self._vforked.pop(pid, None)
            self.fork_parent.pop(pid, None)
            if self._holds is not None:  # (its hold closed with its links, below)
                hold = self._holds.drop(pid)
                if hold is not None:
                    links = [*links, hold]
                self._holds.release(pid)
            if pid not in self._forked:
                self.link_age.pop(pid, None)
        if links:
            self._closer.close(links)

    def target_pids(self) -> list[int]:
        """Processes traced now: those added, their children, --comm execs."""
        return [key.value for key in self._bpf["targets"].keys()]

    def set_comm(self, name: str) -> None:
        """Processes that exec under `name` become targets (Settings.filter_comm)."""
        table = self._bpf["comm_filter"]
        leaf = table.Leaf()
        leaf.name = self._comm = name.encode()[:15]
        table[table.Key(0)] = leaf

    def _set_phase(self, phase: int) -> None:
        if self._bpf is not None and phase > self._phase:
            self._write_phase(phase)
            self._phase = phase

    def start(self) -> None:
        """Calls begin to be traced, in every function at once: call it when
        every probe of the start is attached (the kernel puts them in one at a
        time; a program calling meanwhile would otherwise be traced in some
        functions and not others). Probes attached later count at once. With
        links per process, the children of targets are held at their open of
        a probed library until their links are in (opengate.py), from now on."""
        self._set_phase(TRACING)
        if self.settings.links_per_process and self.gate is None and not self.gate_unavailable:
            self._open_gate()
        if self.settings.links_per_process and self._forks is None and self._bpf is not None:
            wait_ms = fork_hold_ms()
            if wait_ms and self._holds is None:
                with contextlib.suppress(KeyError, OSError):  # (none: linked as told, said)
                    self._holds = ForkHold(self._bpf["fork_holds"].map_fd, wait_ms / 1e3)
                with self._lock:
                    for pid in self._mapping & set(self._pid_links):
                        self._hold(pid)
            self._linker = threading.Thread(target=self._link_forked_children,
                                            name="cudaprobe-link-forks", daemon=True)
            self._linker.start()
            with contextlib.suppress(KeyError, OSError):  # (none: found at the next look)
                self._forks = Seizer(self._bpf["forks"].map_fd, self._holds, self._told_fork,
                                     self._seizer_gone)
            if self._holds is not None and self._forks is not None:
                seizer = self._forks
                self._holds.on_change = lambda pid, holding: (
                    seizer.hold(pid) if holding else seizer.drop(pid))

    def _told_fork(self, child: int, parent: int, made: int, thread: int, vfork: bool,
                   seized: Told | None) -> None:
        """A child made (on the seizer's thread), seized in its hold where its
        parent has one: to the linker. One made by vfork (or posix_spawn) runs
        nothing of its own before it execs, and the gate holds its exec: it is
        left to the gate (linked here only where there is none)."""
        holds = self._holds
        if holds is not None and holds.has(parent) and thread in (0, parent):
            holds.inherited(child, parent)  # (the kernel copied its parent's hold)
        if vfork and self.gate is not None:
            with self._lock:
                self._vforked[child] = parent
            self._release(child)
            return
        if seized is not None:
            self._seized[child] = seized
        self._to_link.put((child, parent, made, seized))

    def _link_forked_children(self) -> None:
        """The linker thread: each child told, linked (link_forked); one seized is
        then let go by the seizer."""
        while (item := self._to_link.get()) is not None:
            child, parent, made, seized = item
            try:
                self.link_forked(child, parent, made, seized)
            except Exception:  # noqa: BLE001 - one child's failure stops no other's
                pass
            if seized is not None and self._seized.pop(child, None) is not None:
                forks = self._forks
                if forks is not None:
                    forks.let_go(child)

    def _seizer_gone(self, pid: int) -> None:
        """The seizer was killed (the OOM killer, an administrator): the children
        it held went on before their links (said, not held), and a new one is
        started (seizer.py)."""
        self._not_held()
        self.notify(f"the seizer of forked children (pid {pid}, cudaprobe-seize) was killed; "
                    "another is started: the children it held, and those made meanwhile, "
                    "are linked late and said; one made at the very moment it died may have "
                    "calls not traced that are not said one by one")

    def _not_held(self) -> None:
        """The children seized and not let go yet: let go before their links
        (by the seizer, next), so not held."""
        for seized in list(self._seized.values()):
            seized.held = False

    def _open_gate(self) -> None:
        gate = OpenGate(self._link_at_open, self._exec_at_gate)
        try:
            gate.start()
            for atts in self._libraries.values():
                gate.watch(atts[0].file.fd, atts[0].file.identity)
            if self.on_exec is not None:
                self.exec_filesystems = gate.watch_execs()
        except GateUnavailable as e:
            gate.close()
            self.gate_unavailable = str(e)
            return
        self.gate = gate
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTSTP, self._stop_at_tstp)

    def _stop_at_tstp(self, _signum: int, _frame: object) -> None:
        """Ctrl-Z: the gate is closed before cudaprobe stops, so that no process on
        the node waits on a stopped cudaprobe to open a CUDA library; it opens
        again at SIGCONT. (SIGSTOP cannot be caught: docs/attach.md.)"""
        gate = self.gate
        if gate is not None and gate.close(timeout=2.0):
            self.gate = None
            self.notify("stopping (SIGTSTP): processes opening CUDA libraries go on meanwhile; "
                        "a child that loads one now gets its probes once cudaprobe continues")
        forks = self._forks
        if forks is not None:  # no child of the tree waits on a stopped cudaprobe
            forks.off()  # (its answer comes after every child it told of before)
            self._not_held()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until SIGCONT
        if forks is not None:
            forks.on()
        signal.signal(signal.SIGTSTP, self._stop_at_tstp)
        if self.gate is None and self._phase == TRACING:
            self._open_gate()
            if self.gate is not None:
                self.notify("continued: children are held at their open of a CUDA library again")

    def pause(self) -> bool:
        """Duty cycling (serve --duty): the library-wide links come off, but those
        of Settings.duty_exact's functions. No call begins from now on (the
        `phase` map's STOPPING, as detach() does; where some functions stay on,
        the entry links' going first does it: they are closed, and waited for,
        before any return link); the calls under way get STOP_GRACE_S to return
        whole, then the return links go, closed on the closer threads (a grace
        period each). A call still under way then has its return unseen: the
        probes let its entry go as another call's return comes in a later
        slice (map `slice_start`), never pairing the two. False where
        there is nothing to pause: links per process, a perf-event attach, or
        tracing over."""
        with self._lock:
            if (self._phase != TRACING or self._paused or self.settings.links_per_process
                    or self.settings.attach != "multi"):
                return False
            self._paused = True
            if not self._kept_links:  # (the kept functions' calls go on beginning)
                self._write_phase(STOPPING)
            links, self._links = self._links, []
        cleanup.close_together(links[1::2])  # each library's pair: (return, entry)
        time.sleep(STOP_GRACE_S)
        self._closer.close(links[0::2])
        return True

    def resume(self) -> bool:
        """The library-wide links go on again, each library's return link first,
        the slice's start written before (map `slice_start`: a return seen from
        now on whose entry holds a call begun before it is another call's, let
        go); calls begin once all are in (TRACING), every function at once
        (where some stayed on, each as its link goes in: within milliseconds).
        False where tracing is over (detach() came meanwhile)."""
        with self._lock:
            if self._phase != TRACING or not self._paused:
                return False
            table = self._bpf["slice_start"]
            table[table.Key(0)] = table.Leaf(time.monotonic_ns())
            for atts in self._wide.values():
                if atts:
                    self._links += self._attach_multi(atts)
            self._paused = False
            self._write_phase(TRACING)
            return True

    def _write_phase(self, phase: int) -> None:
        table = self._bpf["phase"]
        table[table.Key(0)] = table.Leaf(phase)

    def detach(self) -> None:
        """Stop the probes, all at once; the maps and ring buffer stay readable
        until the program is closed. No call begins from now on (STOPPING,
        before any probe comes off: the kernel removes them one at a time); the
        calls under way get the entry probes' removal plus STOP_GRACE_S to
        return, whole, before returns stop being seen too (STOPPED); those
        still under way then are left in flight, reported as such. Safe to call
        twice."""
        gate, self.gate = self.gate, None
        if gate is not None:  # first: it links no child from now on
            gate.close()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        holds, self._holds = self._holds, None
        if holds is not None:  # no fork held from now on, every child waiting let go
            cleanup.close_together(holds.close())
            holds.remove_probes()
        with self._lock:
            stopping = self._phase == TRACING
            self._set_phase(STOPPING)
            links, self._links = self._links + self._kept_links, []
            self._kept_links = []
        forks = self._forks
        if forks is not None:  # the children made until now: linked no more, gone ones said
            self._not_held()
            forks.close()  # (it lets every seized child go as it ends)
            self._forks = None
        linker, self._linker = self._linker, None
        if linker is not None:
            self._to_link.put(None)
            linker.join()
        with self._lock:
            # the links of processes whose every thread has exited: none of their
            # calls can return now, so none is waited for (a -- COMMAND that exited)
            gone: list[int] = []
            for pid, pid_links in self._pid_links.items():
                (gone if threads_gone(pid) else links).extend(pid_links)
            self._pid_links = {}
        cleanup.close_together(links[1::2])  # each library's pair: (return, entry)
        perf = [fd for _name, fd in (self._bpf.uprobe_fds.items() if self._bpf else [])]
        if stopping and (links or perf):  # probes of processes that may still call
            time.sleep(STOP_GRACE_S)
        self._set_phase(STOPPED)
        # from now on the probes do nothing: the return links, the links of the
        # processes gone and the perf probes are closed by a child process (the
        # kernel waits for a grace period as each goes, ~50 ms a link, 0.1 s a
        # perf probe), and fire meanwhile, doing nothing; here, one by one,
        # where no child could be started
        late = list(reversed(links[0::2])) + gone + self._closer.take_pending()
        if (late or perf) and cleanup.close_in_background(late + perf, bool(perf)):
            for name in list(self._bpf.uprobe_fds if perf else ()):
                self._bpf._del_uprobe_fd(name)
            return
        for fd in late:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Detach, and let go of the program, which is about to be cleaned up:
        detach() after this does nothing."""
        self.detach()
        self._bpf = None
