"""Following traced processes while the session runs.

Each poll, --pid targets that exited are reported. Every MAPS_RESCAN_S the
maps of every target (the BPF map's keys: also children and --comm execs) are
looked at again, and a CUDA object not probed yet (a dlopen, `import torch`, a
new process with its own copy) is attached on the spot, with probe ids planned
up front. Every COMM_RESCAN_S, processes that took the --comm NAME without
exec'ing under it (the BPF exec hook sees those) join the targets.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from cudaprobe.analysis.summary import ATTACH, GONE_UNPROBED, Summary, Untraced
from cudaprobe.errors import CudaprobeError, ProcessGone
from cudaprobe.probe.attach import Attacher
from cudaprobe.probe.plan import Attachment, ProbePlan, attachments_in, missing_symbols
from cudaprobe.targets.procmaps import process_age_s, process_name
from cudaprobe.targets.selection import CudaObject, Targets

SAID_UNPROBED = 10  # children gone unprobed said as they come; the rest in the summary
MAPS_RESCAN_S = 0.25  # a statm read per target; maps only when the size changed
COMM_RESCAN_S = 2.0  # a read of every /proc/PID/comm


class Follower:
    def __init__(self, targets: Targets, attacher: Attacher, plan: ProbePlan, summary: Summary,
                 notify: Callable[[str], None]) -> None:
        self.targets = targets
        self.attacher = attacher
        self.plan = plan
        self.summary = summary
        self.notify = notify
        attacher.notify = notify
        # --gpu-time into running processes: given each process that joins the
        # trace without the gate holding it (the gate's are given at their open)
        self.on_later: Callable[[int], None] | None = None
        # programs with CUDA linked in, probed at a process's exec (the gate's thread):
        # told, and counted in the summary, at the next step
        self._at_exec: list[tuple[CudaObject, list[Attachment], str]] = []
        self._at_exec_lock = threading.Lock()
        attacher.on_exec = self._exec_of
        self.waiting_for_pids = bool(targets.requested)
        self._next_maps_scan = self._next_comm_scan = 0.0
        self._named: set[int] = set()  # present at the start, or said as started under the name
        self._found_named: set[int] = set()  # made targets by the scan of names (_add_named)
        self._unprobed = 0  # children gone before their probes were in, said so far
        self._names_seen: dict[int, str] = {}  # pid -> its name, for its children gone
        self._defined = {a.probe.symbol for a in plan.attachments}
        self._functions = list(dict.fromkeys(p.function for p in plan.probes))
        self._libraries = sorted({a.path for a in plan.attachments})
        if targets.comm is not None:  # the present ones are targets before we say so
            attacher.set_comm(targets.comm)
            self._add_named(later=False)
            self._next_comm_scan = time.monotonic() + COMM_RESCAN_S
        for pid in targets.requested:
            attacher.add_target(pid)
        # every probe of the start is in: tracing starts before the notices say so
        attacher.start()
        targets.attached_at(attacher.target_pids())
        for pid in sorted(self._named):
            self._ran_before_attach(pid, _name(pid))
        for pid in targets.requested:
            self._ran_before_attach(pid, targets.names[pid])
        if attacher.gate is not None and not attacher.exec_filesystems:
            notify("a program with the CUDA runtime linked in that a traced process execs is "
                   "probed at cudaprobe's next look, within about 0.25 s of its start (no file "
                   "system's execs could be watched)")
        if attacher.gate_unavailable:
            notify("children of traced processes are probed at cudaprobe's next look, within "
                   "about 0.1 s of their start: their calls before are not included "
                   f"({attacher.gate_unavailable})")
        if targets.comm is not None:
            # the name as given, quoted: notify escapes what a terminal would act on
            notify(f"following every process named '{targets.comm[:15]}', present and future")
        if targets.requested:
            names = ", ".join(f"pid {pid} ({targets.names[pid]})" for pid in targets.requested)
            notify(f"attached to {names}: tracing ends when "
                   f"{'it exits' if len(targets.requested) == 1 else 'they have exited'}; "
                   "calls made before the attach, or under way at it, are not included")

    def _ran_before_attach(self, pid: int, name: str) -> None:
        """A target running at the start (--pid, --comm), or a child linked late,
        ran untraced until its links went in: the summary says for how long (its
        age then, where it was linked later than the start)."""
        seconds = self.attacher.link_age.pop(pid, None)  # its age as its links went in
        if seconds is None:
            try:
                seconds = process_age_s(pid)
            except ProcessGone:  # gone as it was linked: said all the same, its span
                seconds = 0.0  # not known
        self.summary.untraced.append(Untraced(pid, name, seconds, ATTACH))

    def step(self) -> bool:
        """Report exits, rescan when due; True once every --pid target has exited."""
        for pid in self.targets.exited():
            self.notify(f"pid {pid} ({self.targets.names.get(pid, '?')}) exited")
        # every poll: the window of a new child is short
        for pid in self.attacher.follow_children():
            self._tell_linked(pid)
            if self.on_later is not None:
                self.on_later(pid)
        for pid, name, late in self.attacher.take_linked_at_open():
            self._names_seen[pid] = name
            if not self._exec_named(pid, name, at_open=not late) and late:
                self._linked_late(pid, name)
        with self._at_exec_lock:
            at_exec, self._at_exec = self._at_exec, []
        for obj, atts, why in at_exec:
            self._probed_at_exec(obj, atts, why)
        now = time.monotonic()
        if now >= self._next_comm_scan:
            self._next_comm_scan = now + COMM_RESCAN_S
            self._add_named()
        if now >= self._next_maps_scan:
            self._next_maps_scan = now + MAPS_RESCAN_S
            self._rescan_maps()
        self.tell_unprobed()
        self.count_processes()
        return self.waiting_for_pids and not self.targets.requested

    def _child_name(self, pid: int) -> str:
        """Its name, or, gone, its parent's (a fork's name is its parent's)."""
        name = _name(pid)
        parent = self.attacher.fork_parent.get(pid)
        if name == "exited" and parent is not None:
            name = self._names_seen.get(parent, name)
        return name

    def _tell_linked(self, pid: int) -> None:
        """A child linked at a look or at its making, not held at its open: said,
        with its time before its links."""
        name = self._names_seen[pid] = self._child_name(pid)
        if not self._exec_named(pid, name):
            self._linked_late(pid, name)

    def tell_forked(self) -> None:
        """At the end: the children linked at their making since the last step,
        said as a step would."""
        for pid in self.attacher.take_forked():
            self._tell_linked(pid)
        self.tell_unprobed()
        self.count_processes()

    def tell_unprobed(self) -> None:
        """Children that shared a parent's CUDA libraries (a fork without exec)
        and were gone before their probes could be put in: each in the summary,
        the first SAID_UNPROBED said as they come (Attacher.link_forked)."""
        for pid, parent in self.attacher.take_unprobed():
            name = self._names_seen.get(parent) or _name(parent)
            self.summary.untraced.append(Untraced(pid, name, 0.0, GONE_UNPROBED, parent))
            self._unprobed += 1
            if self._unprobed <= SAID_UNPROBED:
                self.notify(f"pid {pid} ({name}), a child of pid {parent} sharing its CUDA "
                            "libraries (a fork without exec), was gone before its probes could "
                            "be put in: any CUDA call it made is not included"
                            + (" (any more: in the summary)"
                               if self._unprobed == SAID_UNPROBED else ""))

    def count_processes(self) -> None:
        """The summary's count of processes given probes of their own."""
        if self.attacher.settings.links_per_process:
            self.summary.processes_traced = len(self.attacher.processes)

    def _exec_named(self, pid: int, name: str, at_open: bool = False) -> bool:
        """A process that exec'd under the --comm name got its own probes just now:
        said. Held at its open of a probed library (`at_open`), it is traced from
        its first call; linked at a poll, its calls before were not seen, and the
        summary says for how long."""
        comm = self.targets.comm
        if comm is None or pid in self._named or name != comm[:15]:
            return False
        self._named.add(pid)
        if at_open:
            self.notify(f"pid {pid} ({name}) started under the name: traced from its first call")
            return True
        self._ran_before_attach(pid, name)
        self.notify(f"pid {pid} ({name}) started under the name: probes attached; its "
                    "calls before, since its exec, are not included")
        return True

    def _linked_late(self, pid: int, name: str) -> None:
        """A child linked at a poll, not held at its open (opengate.py): a fork
        that shares its parent's CUDA mappings, or any child where there is no
        gate. Its calls since its fork were not seen: said, and summed up."""
        self._ran_before_attach(pid, name)
        if self.attacher.gate is not None:
            self.notify(f"pid {pid} ({name}) maps CUDA libraries it was not held opening (a "
                        "fork without exec, or an open while cudaprobe was stopped): probes "
                        "attached; its calls before, since its start, are not included")

    def _exec_of(self, pid: int, fd: int) -> None:
        """On the gate's thread, a process of the traced tree held at its exec of
        `fd`'s file: if it is a program with CUDA linked in, not probed yet, its
        probes go on and the process is linked, before it runs."""
        try:
            obj = self.targets.exec_object(pid, fd)
        except (CudaprobeError, OSError):
            return
        if obj is None:
            return
        atts, why = [], ""
        try:
            atts = attachments_in(self.plan.probes, obj.file)
            if atts:
                self.attacher.attach_library(atts)
                self.attacher.link_target(pid)
        except (CudaprobeError, OSError) as e:
            atts, why = [], str(e)
        with self._at_exec_lock:
            self._at_exec.append((obj, atts, why))

    def _probed_at_exec(self, obj: CudaObject, atts: list[Attachment], why: str) -> None:
        if why:
            self.notify(f"cannot probe {obj.where}, exec'd by pid {obj.pid}: {why}")
            return
        if not atts:
            return
        name = os.path.basename(obj.path)[:15]  # its name once exec'd (it may not be yet)
        self.notify(f"pid {obj.pid} ({name}) execs {obj.where}, which has CUDA linked in: "
                    f"{len(atts)} probes attached before it ran")
        self._add_library(obj, atts)

    def _add_named(self, later: bool = True) -> None:
        """The processes of the --comm name now made targets: at the start (the
        present ones), or `later`, by the scan, which may find one between its
        exec and its open of a probed library: it is said once linked (at that
        open, _exec_named), as if the exec tracepoint alone had found it."""
        for pid in self.targets.named_now():
            if pid in self._found_named or pid in self._named:
                continue
            self._found_named.add(pid)
            if not later:
                self._named.add(pid)
                self.attacher.add_target(pid)
                continue
            # one the exec did not tell (a symbolic link's name, a program that
            # renamed itself): linked here, before any open the gate would hold
            late = self.attacher.add_named(pid)
            if late is not None:
                name = self._names_seen[pid] = _name(pid)
                self._exec_named(pid, name, at_open=not late)
            if self.on_later is not None:
                self.on_later(pid)

    def _rescan_maps(self) -> None:
        # the processes named by --pid first: a library new to several processes
        # (a fork shares its parent's maps) is reported as the named one's
        pids = sorted(self.attacher.target_pids(), key=lambda pid: pid not in self.targets.names)
        found, gone = self.targets.scan(pids)
        for note in self.targets.refusals:
            self.notify(note)
        self.targets.refusals.clear()
        for pid in gone:
            self.attacher.remove_target(pid)
            self._named.discard(pid)
            self._found_named.discard(pid)
        for obj in found:
            self._attach(obj)
        if self.attacher.on_rescan is not None:
            self.attacher.on_rescan(self.attacher.target_pids())

    def _attach(self, obj: CudaObject) -> None:
        try:
            atts = attachments_in(self.plan.probes, obj.file)
            if not atts:
                return
            self.attacher.attach_library(atts)
            self.attacher.link_target(obj.pid)
        except (CudaprobeError, OSError) as e:  # it went away, or the kernel refused
            self.notify(f"cannot probe {obj.where}, mapped by pid {obj.pid}: {e}")
            return
        name, untraced_s = _name(obj.pid), time.monotonic() - obj.mapped_since
        self.notify(f"pid {obj.pid} ({name}) maps {obj.where}: {len(atts)} probes attached; "
                    f"its calls there in the up to {untraced_s:.2f}s before are not included")
        self.summary.untraced.append(Untraced(obj.pid, name, untraced_s, obj.file.name))
        self._add_library(obj, atts)

    def _add_library(self, obj: CudaObject, atts: list[Attachment]) -> None:
        """A file probed while tracing, in the summary's libraries and symbols."""
        self._defined |= {a.probe.symbol for a in atts}
        self._libraries.append(obj.file.name)
        self.summary.libraries = sorted(self._libraries)
        self.summary.not_found = missing_symbols(self._functions, self._libraries,
                                                 self._defined)


def _name(pid: int) -> str:
    try:
        return process_name(pid)
    except ProcessGone:
        return "exited"
