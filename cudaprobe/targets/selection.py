"""The processes a trace follows, and the CUDA code they map.

`--pid` and `--comm` name processes and `-- COMMAND` starts one; the BPF
`targets` map holds them, and its fork and exec tracepoints add their children
and new processes of that name. This module looks at what those processes map
(procmaps), picks the objects that define a traced function (elfsyms.defines_any):
libcudart and libcuda wherever they live, and executables or libraries with
the runtime linked in statically. It tells the session what is new since it
last looked: a library dlopen()ed after attach, a process that appeared, a
target that exited.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from cudaprobe.errors import (
    CudaNotMapped,
    CudaprobeError,
    LibraryNotFound,
    ProcessGone,
    SeccompHazard,
)
from cudaprobe.targets.elf import interpreter
from cudaprobe.targets.elfsyms import defines_any, name_pattern
from cudaprobe.targets.environment import seccomp_filtered, uretprobes_kill_filtered
from cudaprobe.targets.libs import discover_libraries
from cudaprobe.targets.openfile import OpenedFile, open_node_file
from cudaprobe.targets.procmaps import (
    MappedFile,
    is_kernel_thread,
    pids_named,
    process_age_s,
    process_alive,
    process_name,
    read_maps,
    same_mount_namespace,
    thread_group,
    vm_pages,
)


@dataclass(frozen=True)
class CudaObject:
    file: OpenedFile  # what the probes attach to, opened through the mapping
    path: str  # the name the process knows it by
    pid: int  # the process it was found in
    # since when it may have been mapped (time.monotonic()): the process's last
    # scan without it, or the process's start
    mapped_since: float = 0.0

    @property
    def where(self) -> str:
        """The object as a user would name it, with the process when it sees another name."""
        if self.file.name == self.path:
            return self.path
        return f"{self.path} (pid {self.pid}'s, via {self.file.name})"


class Targets:
    """Traced processes: validates --pid, finds --comm matches, finds new CUDA objects."""

    def __init__(self, symbols: Iterable[str], pids: Iterable[int] = (),
                 comm: str | None = None, discover: bool = True) -> None:
        self.symbols = sorted(set(symbols))
        self.comm = comm
        # False with --lib: probe what the user named, look for nothing else
        self.discover = discover
        self.notes: list[str] = []
        # mapped files not probed because what opened is not what the maps name
        self.refusals: list[str] = []
        self._pattern = name_pattern(self.symbols)
        self._holds_cuda: dict[tuple[int, int], bool] = {}  # file identity -> verdict
        # the CUDA files found, opened, by identity: probed through these descriptors
        self._opened: dict[tuple[int, int], OpenedFile] = {}
        self.probed: set[tuple[int, int]] = set()  # identities of files probed already
        self._probing = threading.Lock()  # `probed`: the exec gate's thread adds to it too
        self._vm_pages: dict[int, int] = {}  # pid -> address-space size when last scanned
        self._mapped: dict[int, int] = {}  # pid -> files it mapped when last scanned
        # CUDA code seen in the targets' maps or a command's links, probed or not:
        # what says a command without calls loaded no CUDA
        self.cuda_seen: set[str] = set()
        self._scanned_at: dict[int, float] = {}  # pid -> when last scanned (monotonic)
        self._me = os.getpid()
        # --pid targets still running, each with a pidfd that says when it exits
        self.requested: dict[int, int] = {}
        self.names: dict[int, str] = {}
        for pid in pids:
            tgid = thread_group(pid)
            self.names[tgid] = process_name(tgid)
            if is_kernel_thread(tgid):
                raise CudaprobeError(f"pid {tgid} ({self.names[tgid]}) is a kernel thread: it "
                                     "has no user address space, so no CUDA code to probe")
            if not process_alive(tgid):
                raise ProcessGone(tgid, f"{self.names[tgid]} has exited (a zombie its parent "
                                        "has not reaped: nothing left to trace)")
            if uretprobes_kill_filtered() and seccomp_filtered(tgid):
                raise SeccompHazard(tgid, self.names[tgid], os.uname().release)
            if tgid != pid:
                self.notes.append(f"{pid} is a thread of pid {tgid} ({self.names[tgid]}): "
                                  f"tracing all of {tgid}")
            if tgid not in self.requested:
                try:
                    self.requested[tgid] = os.pidfd_open(tgid)
                except ProcessLookupError:
                    raise ProcessGone(tgid) from None

    def close(self) -> None:
        for fd in self.requested.values():
            os.close(fd)
        self.requested.clear()

    def attached_up_front(self, files: Iterable[OpenedFile]) -> None:
        """Libraries probed before any scan (the usual places): never again."""
        for f in files:
            self.probed.add(f.identity)

    def command_objects(self, argv0: str) -> list[OpenedFile]:
        """CUDA code in a command about to start: its executable (nvcc links the
        runtime in) and the libraries it links (an rpath copy of libcudart)."""
        exe = shutil.which(argv0) if os.sep not in argv0 else argv0
        if not exe or not os.path.isfile(exe):
            return []  # LaunchedCommand says so
        found = []
        for path in [exe, *_linked_libraries(exe)]:
            try:  # the user's own command and what it links: the node's files
                f = open_node_file(os.path.realpath(path))
            except LibraryNotFound:
                continue
            if not self._holds(f):
                continue
            self.cuda_seen.add(f.name)
            if f.identity not in self.probed:
                self.probed.add(f.identity)
                found.append(f)
        return found

    def attached_at(self, pids: Iterable[int]) -> None:
        """`pids` are traced from now: a CUDA object scan() finds in them later
        was mapped after this."""
        now = time.monotonic()
        for pid in pids:
            self._scanned_at.setdefault(pid, now)

    def named_now(self) -> list[int]:
        """Processes called --comm NAME right now (not cudaprobe itself)."""
        if self.comm is None:
            return []
        return [pid for pid in pids_named(self.comm) if pid != self._me]

    def scan(self, pids: Iterable[int]) -> tuple[list[CudaObject], list[int]]:
        """CUDA objects that `pids` map and that are not probed yet; and the pids gone.

        A process whose address space kept its size since the last scan is
        skipped: reading /proc/PID/maps costs more than the one line of statm.
        """
        found: list[CudaObject] = []
        gone: list[int] = []
        now = time.monotonic()
        for pid in pids:
            since = self._scanned_at.get(pid)
            self._scanned_at[pid] = now
            try:
                pages = vm_pages(pid)
                if self._vm_pages.get(pid) == pages or not self.discover:
                    continue
                files = read_maps(pid)
                if since is None:
                    since = now - process_age_s(pid)
            except ProcessGone:
                gone.append(pid)
                self._vm_pages.pop(pid, None)
                self._mapped.pop(pid, None)
                self._scanned_at.pop(pid, None)
                continue
            self._vm_pages[pid] = pages
            self._mapped[pid] = len(files)
            for f in files:
                opened = self._is_cuda(f)
                if opened is None:
                    continue
                self.cuda_seen.add(f.path)
                # as stat gives it, as for the node's files (maps may print
                # another device: a btrfs subvolume's file system's)
                if self._first_to_probe(opened.identity):
                    found.append(CudaObject(opened, f.path, pid, since))
        return found, gone

    def _first_to_probe(self, identity: tuple[int, int]) -> bool:
        with self._probing:
            if identity in self.probed:
                return False
            self.probed.add(identity)
            return True

    def exec_object(self, pid: int, fd: int) -> CudaObject | None:
        """The file a process of the traced tree is held exec'ing (the gate's
        descriptor, opened by the kernel for the exec: the file itself, not a
        name), if it defines a traced function and is not probed yet: a program
        with the CUDA runtime linked in. Judged once per file."""
        if not self.discover:
            return None
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if (not stat.S_ISREG(st.st_mode) or identity in self.probed
                or self._holds_cuda.get(identity) is False):
            return None
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")  # the path the kernel gives: shown only
        except OSError:
            name = f"(the program pid {pid} execs)"
        opened = OpenedFile(os.dup(fd), name)
        if not self._holds(opened) or not self._first_to_probe(identity):
            opened.close()
            return None
        self._opened[identity] = opened
        self.cuda_seen.add(name)
        return CudaObject(opened, name, pid, time.monotonic())

    def _is_cuda(self, f: MappedFile) -> OpenedFile | None:
        """The mapped file, opened through the mapping, if it defines a traced
        function; judged once per file (as its maps line names it)."""
        if self._holds_cuda.get(f.identity) is False:
            return None
        opened = self._opened.get(f.identity)
        if opened is None:
            try:
                opened = f.open()
            except (LibraryNotFound, ProcessGone) as e:
                # unmapped meanwhile, or not the file its maps line names: not
                # judged, looked at again if it is still there at the next scan
                if isinstance(e, LibraryNotFound):
                    self._refused(f"not probing {f.host_path}: {e}")
                return None
            if not self._holds(opened):
                return None
            self._opened[f.identity] = opened
        return opened

    def _holds(self, f: OpenedFile) -> bool:
        verdict = self._holds_cuda.get(f.identity)
        if verdict is None:
            verdict = self._holds_cuda[f.identity] = defines_any(f, self._pattern)
        return verdict

    def _refused(self, note: str) -> None:
        if note not in self.refusals:
            self.refusals.append(note)

    def not_mapped_error(self) -> CudaNotMapped:
        """The error for --pid targets that map nothing CUDA, saying what was looked for."""
        pids = sorted(self.requested)
        names = ", ".join(f"pid {pid} ({self.names[pid]})" for pid in pids)
        files = sum(self._mapped.get(pid, 0) for pid in pids)
        elsewhere = [pid for pid in pids if not same_mount_namespace(pid)]
        note = (f"; {', '.join(f'pid {pid}' for pid in elsewhere)} "
                f"{'runs' if len(elsewhere) == 1 else 'run'} in another mount namespace, "
                "its files read through /proc/PID/root") if elsewhere else ""
        return CudaNotMapped(names + (" is" if len(pids) == 1 else " are"), files, self.symbols,
                             note)

    def exited(self) -> list[int]:
        """--pid targets that exited since the last call."""
        if not self.requested:
            return []
        readable, _, _ = select.select(list(self.requested.values()), [], [], 0)
        done = [pid for pid, fd in self.requested.items() if fd in readable]
        for pid in done:
            os.close(self.requested.pop(pid))
        return done


def initial_libraries(targets: Targets, apis: set[str], command: list[str],
                      wait: bool) -> list[OpenedFile]:
    """What to probe before tracing starts, when following processes.

    --pid: what the processes map now (an error if that is nothing, unless
    `wait`). Every mode: the usual places too, so that a process that starts
    later (a child of a --pid target, a --comm exec, the command's
    descendants) is traced from its first call; with -- COMMAND, also what its
    executable holds and links; with --comm, what the processes of that name
    map now.
    """
    found: list[OpenedFile] = []
    if targets.requested:
        objects, _ = targets.scan(list(targets.requested))
        if not objects and not wait:
            raise targets.not_mapped_error()
        found += [o.file for o in objects]
    usual = [f for f in map(_node_file, discover_libraries(apis))
             if f is not None and f.identity not in targets.probed]
    targets.attached_up_front(usual)
    found += usual
    if command or targets.comm is not None:
        if command:
            found += targets.command_objects(command[0])
        objects, _ = targets.scan(targets.named_now())
        found += [o.file for o in objects]
    return found


def _node_file(path: str) -> OpenedFile | None:
    try:
        return open_node_file(path)
    except LibraryNotFound:  # gone since it was listed
        return None


_LDD_LINE = re.compile(r"=> (/\S+) \(0x")


def _linked_libraries(exe: str) -> list[str]:
    """What the loader would map for `exe` (`ld.so --list`, as ldd does; runs nothing of it)."""
    loader = interpreter(exe)
    if loader is None or not os.path.isfile(loader):
        return []
    try:
        out = subprocess.run([loader, "--list", exe], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [m.group(1) for m in map(_LDD_LINE.search, out.splitlines()) if m]
