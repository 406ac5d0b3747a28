"""Running processes as /proc shows them: names, threads, and the files they map.

Paths in /proc/PID/maps are the ones the process sees, and the process's to
change: a mapped file is never opened by that name, but through the mapping
itself (openfile.open_mapped: /proc/PID/map_files), which reaches the very
file, in a container's mount namespace or deleted since. Pids are those of the
pid namespace cudaprobe runs in: the host's, whatever a containerised process
believes its own pid to be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cudaprobe.errors import CudaprobeError, ProcessGone
from cudaprobe.targets.openfile import Mapped, OpenedFile, open_mapped, proc_base

DELETED = " (deleted)"


@dataclass(frozen=True)
class MapLine:
    """One line of /proc/PID/maps, every field of it."""

    start: int
    end: int
    perms: str  # "r-xp"
    offset: int  # file offset mapped at `start`
    major: int  # the device, as the kernel prints it (hex major:minor)
    minor: int
    inode: int
    path: str  # "" for an anonymous mapping; "[heap]", "/memfd:x (deleted)", ...

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")


def parse_maps(text: str) -> list[MapLine]:
    """Every line of a maps file, in address order (the kernel's)."""
    out = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        major, minor = (int(v, 16) for v in fields[3].split(":"))
        out.append(MapLine(start, end, fields[1], int(fields[2], 16), major, minor,
                           int(fields[4]), fields[5] if len(fields) == 6 else ""))
    return out


def map_lines(pid: int) -> list[MapLine]:
    """What the process maps, every line: the one reader of /proc/PID/maps."""
    return parse_maps(_read(pid, "maps"))


@dataclass(frozen=True)
class MappedFile:
    """A file the process maps executable, found by its first such mapping."""

    path: str  # as the process sees it
    host_path: str  # how users are shown it from here (/proc/PID/root/... elsewhere)
    identity: tuple[int, int]  # (st_dev, st_ino) per the maps line: one file, one probe set
    mapped: Mapped

    def open(self) -> OpenedFile:
        """The very file mapped, checked (openfile.open_mapped)."""
        return open_mapped(self.mapped)


def _read(pid: int, name: str) -> str:
    text = _read_in(f"/proc/{pid}", pid, name)
    if name in ADDRESS_SPACE and not text.strip(" 0\n"):  # none: its main thread exited?
        base = proc_base(pid)
        if base != f"/proc/{pid}":
            return _read_in(base, pid, name)
    return text


# what a process whose main thread exited (pthread_exit) shows empty at /proc/PID
# and whole at /proc/PID/task/TID of a thread that runs on
ADDRESS_SPACE = ("maps", "statm")


def _read_in(base: str, pid: int, name: str) -> str:
    try:
        # a process names itself and its files with any bytes: kept, never a UnicodeDecodeError
        with open(f"{base}/{name}", encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(pid) from None
    except PermissionError:  # another user's process (--dump-bpf runs without root)
        raise _not_ours(pid, name) from None


def _not_ours(pid: int, name: str) -> CudaprobeError:
    """The error for a /proc file of `pid` that could not be read: ProcessGone
    for a process that is exiting (the kernel refuses some of its files, its
    namespaces' among them, between the exit and the zombie), else the refusal."""
    if not process_alive(pid):
        return ProcessGone(pid, "exiting")
    if os.geteuid() != 0:
        return CudaprobeError(f"pid {pid}: cannot read /proc/{pid}/{name}: permission denied",
                              fix="run it with sudo")
    # root refused: the kernel's ptrace access check (another user namespace's
    # process, such as a container's init; a security module)
    return CudaprobeError(f"pid {pid}: cannot read /proc/{pid}/{name}: permission denied even "
                          "to root (the process is protected from being inspected: another "
                          "user namespace's, or a security module's rule)",
                          fix="trace it from inside its own namespace")


def process_name(pid: int) -> str:
    """The process's comm (its main thread's name, at most 15 characters)."""
    return _read(pid, "comm").rstrip("\n")


def thread_group(pid: int) -> int:
    """The process a thread id belongs to (a pid is its own thread group)."""
    for line in _read(pid, "status").splitlines():
        if line.startswith("Tgid:"):
            return int(line.split()[1])
    raise ProcessGone(pid, "no Tgid in /proc/PID/status")


def process_age_s(pid: int) -> float:
    """Seconds since the process was forked (/proc/PID/stat's starttime)."""
    fields = _read(pid, "stat").rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: ticks after boot
    with open("/proc/uptime") as f:
        return max(0.0, float(f.read().split()[0]) - started)


def vm_pages(pid: int) -> int:
    """Size of the address space in pages: a cheap sign that the mappings changed.

    /proc/PID/statm is one line; /proc/PID/maps of a PyTorch process is
    thousands, read under the process's mmap lock. Any dlopen grows this.
    """
    return int(_read(pid, "statm").split(maxsplit=1)[0])


PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread


def is_kernel_thread(pid: int) -> bool:
    """A kernel thread (kthreadd, kworker/...): no user address space (no mm)."""
    fields = _read(pid, "stat").rsplit(")", 1)[1].split()
    return bool(int(fields[6]) & PF_KTHREAD)  # the 9th field: flags


PF_EXITING = 0x00000004  # include/linux/sched.h: the task is getting shut down


def process_alive(pid: int) -> bool:
    """Running: not exiting, not a zombie (whose memory is gone), not reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # bytes: its comm may be any
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    try:
        if fields[0] == b"Z":  # its main thread exited; others may run on
            return proc_base(pid) != f"/proc/{pid}"
        return fields[0] not in (b"X", b"x") and not int(fields[6]) & PF_EXITING
    except (IndexError, ValueError):
        return False


def threads_gone(pid: int) -> bool:
    """No thread of `pid` can begin or finish a call: the process is reaped,
    or each of its threads is a zombie (or dead)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[:1]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if state not in ([b"Z"], [b"X"], [b"x"]):
            return False
    return True


def process_running(pid: int) -> bool:
    """A process (not a thread of one: /proc shows those by their id too) that
    is alive (process_alive)."""
    try:
        return thread_group(pid) == pid and process_alive(pid)
    except CudaprobeError:
        return False


def pids_named(comm: str) -> list[int]:
    """Processes whose comm is `comm` (compared as the kernel keeps it: 15 characters)."""
    want = os.fsencode(comm)[:15]  # 15 bytes, not characters
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.fsencode(process_name(int(entry))) == want:
                    found.append(int(entry))
            except ProcessGone:
                continue
    return sorted(found)


def same_mount_namespace(pid: int) -> bool:
    try:
        return (os.stat(f"{proc_base(pid)}/ns/mnt").st_ino
                == os.stat("/proc/self/ns/mnt").st_ino)
    except FileNotFoundError:
        raise ProcessGone(pid) from None
    except PermissionError:
        raise _not_ours(pid, "ns/mnt") from None


def read_maps(pid: int) -> list[MappedFile]:
    """Files the process maps executable, one entry per file, in address order.
    Nothing is opened here: MappedFile.open does it, through the mapping."""
    local = same_mount_namespace(pid)
    found: dict[tuple[int, int], MappedFile] = {}
    for line in map_lines(pid):
        if "x" not in line.perms or not line.is_file:
            continue
        identity = (os.makedev(line.major, line.minor), line.inode)
        if identity in found:
            continue
        if line.path.endswith(DELETED):
            name = f"/proc/{pid}/map_files/{line.start:x}-{line.end:x}"
        else:
            name = line.path if local else f"/proc/{pid}/root{line.path}"
        found[identity] = MappedFile(line.path, name, identity, Mapped(
            pid, line.start, line.end, line.major, line.minor, line.inode, line.path, name))
    return list(found.values())


SYS_KCMP, KCMP_VM = 312, 1  # x86-64


def shares_memory(pid: int, other: int) -> bool:
    """`pid` and `other` share one address space (kcmp KCMP_VM): a child made
    by vfork that has not exec'd yet, and its parent. False where the kernel
    cannot say (no kcmp, either gone)."""
    import ctypes  # noqa: PLC0415 - rarely wanted

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(SYS_KCMP, pid, other, KCMP_VM, 0, 0) == 0
