"""Running processes as /proc shows them: names, threads, and the files they map.

Paths in /proc/PID/maps are the ones the process sees. For a process in
another mount namespace (a container, `unshare -m`) that path may name another
file here, or none, so such files are opened through /proc/PID/root, which the
kernel resolves in the process's own namespace. A mapped file deleted since
(a library upgraded under a running process) is reached through
/proc/PID/map_files. Pids are those of the pid namespace cudaprobe runs in: the
host's, whatever a containerised process believes its own pid to be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cudaprobe.errors import CudaprobeError, ProcessGone

DELETED = " (deleted)"


@dataclass(frozen=True)
class MappedFile:
    path: str  # as the process sees it
    host_path: str  # the same file, openable from here
    identity: tuple[int, int]  # (st_dev, st_ino) as seen from here: one file, one probe set


def _read(pid: int, name: str) -> str:
    try:
        # a process names itself and its files with any bytes: kept, never a UnicodeDecodeError
        with open(f"/proc/{pid}/{name}", encoding="utf-8", errors="surrogateescape") as f:
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
        return fields[0] not in (b"Z", b"X", b"x") and not int(fields[6]) & PF_EXITING
    except (IndexError, ValueError):
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
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino
    except FileNotFoundError:
        raise ProcessGone(pid) from None
    except PermissionError:
        raise _not_ours(pid, "ns/mnt") from None


def read_maps(pid: int) -> list[MappedFile]:
    """Files the process maps executable, one entry per file, in address order."""
    local = same_mount_namespace(pid)
    found: dict[tuple[int, int], MappedFile] = {}
    seen_lines: set[tuple[str, str]] = set()
    for line in _read(pid, "maps").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "x" not in fields[1] or not fields[5].startswith("/"):
            continue
        addresses, inode, path = fields[0], fields[4], fields[5]
        if (inode, path) in seen_lines:
            continue
        seen_lines.add((inode, path))
        mapped = _host_file(pid, addresses, int(inode), path, local)
        if mapped is not None:
            found.setdefault(mapped.identity, mapped)
    return list(found.values())


def _host_file(pid: int, addresses: str, inode: int, path: str,
               local: bool) -> MappedFile | None:
    """Where this mapped file can be opened from here, checked by inode number."""
    candidates = []
    if not path.endswith(DELETED):
        candidates.append(path if local else f"/proc/{pid}/root{path}")
    candidates.append(f"/proc/{pid}/map_files/{addresses}")
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if st.st_ino == inode:
            return MappedFile(path, candidate, (st.st_dev, st.st_ino))
    return None  # unmapped or replaced while we looked
