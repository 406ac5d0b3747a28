"""Files opened once, then read and probed through that descriptor alone.

A path is a name, and the name of a file a traced process maps is the
process's to change: a symlink it swaps, a directory it renames, a FIFO it
puts in the library's place. Whatever cudaprobe looks at twice by name may be
two files; a uprobe attached by name writes its breakpoint into whichever
file the name means at that moment, and every process mapping that file runs
it. So a file is opened once (`open_mapped` for what a process maps,
`open_node_file` for the node's own files: --lib, the usual places), checked
through the descriptor (a regular file; for a mapping, the device and inode
its maps line names), parsed from the descriptor (mmap, pread) and attached
through `/proc/self/fd/N`: the kernel resolves that link to the very file the
descriptor holds, whatever its name means by then.

Every open is non-blocking and takes no controlling terminal, so that a FIFO
or a tty where a library was returns at once and is refused by its type. The
descriptor lives as long as its OpenedFile: the attachments made through it
hold it, so its number is never another file's while it is used.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import struct
import weakref
from dataclasses import dataclass

from cudaprobe.errors import LibraryNotFound, ProcessGone

FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
SYS_OPENAT2 = 437  # x86-64
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_IN_ROOT = 0x02, 0x04, 0x10
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class OpenedFile:
    """One open file: `name` is what users are shown, `proc_path` what the
    kernel is given where it wants a path (uprobe attach)."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name
        self._closer = weakref.finalize(self, os.close, fd)
        self.stat = os.fstat(fd)

    @property
    def proc_path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    @property
    def identity(self) -> tuple[int, int]:
        """(st_dev, st_ino): one file, one probe set."""
        return self.stat.st_dev, self.stat.st_ino

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """What was read: the same key is the same bytes (a write moves mtime and ctime)."""
        st = self.stat
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def map(self) -> mmap.mmap:
        """The whole file, read-only (ValueError for an empty one)."""
        return mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def close(self) -> None:
        self._closer()

    def __repr__(self) -> str:
        return f"OpenedFile({self.name!r}, fd={self.fd})"


def _regular(fd: int, name: str) -> OpenedFile:
    """The descriptor as an OpenedFile, refused (and closed) unless a regular file."""
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise LibraryNotFound(name, what)
    return OpenedFile(fd, name)


def open_node_file(path: str) -> OpenedFile:
    """A file of this node's (one the user names, a library in the usual places):
    trusted, so its symlinks are followed; opened once all the same."""
    try:
        fd = os.open(path, FLAGS)
    except FileNotFoundError:
        raise LibraryNotFound(path) from None
    except OSError as e:
        raise LibraryNotFound(path, f"cannot read it ({e.strerror})") from None
    return _regular(fd, path)


@dataclass(frozen=True)
class Mapped:
    """What a maps line says of the file behind it (procmaps.MapLine's fields)."""

    pid: int
    start: int
    end: int
    major: int
    minor: int
    inode: int
    path: str  # as the process sees it ("... (deleted)" for a file gone since)
    name: str  # how users are shown it


def _state(path: str) -> bytes:
    """The state letter in a /proc .../stat file (b"" if gone)."""
    try:
        with open(path, "rb") as f:  # bytes: its comm may be any
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b""


def proc_base(pid: int) -> str:
    """Where /proc shows the process: /proc/PID, or, when its main thread has
    exited (pthread_exit: a zombie leader) while other threads run on, the
    /proc/PID/task/TID of one of those, whose files (maps, root, ns) are the
    process's, where the leader's are empty or gone."""
    if _state(f"/proc/{pid}/stat") != b"Z":
        return f"/proc/{pid}"
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t != str(pid))
    except OSError:
        return f"/proc/{pid}"
    for tid in tids:
        if _state(f"/proc/{pid}/task/{tid}/stat") not in (b"", b"Z", b"X", b"x"):
            return f"/proc/{pid}/task/{tid}"
    return f"/proc/{pid}"


def open_mapped(m: Mapped) -> OpenedFile:
    """The file behind one mapping, checked to be the one its maps line names.

    /proc/PID/map_files/START-END opens the file the mapping holds, whatever
    its name: nothing the process does to names can swap it. The kernel lets
    only CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) open it; without it the
    path is resolved in the process's root with openat2, following no
    symlink. Either way the file must be the inode the line names, on its
    device (stat's, or its file system's where they differ: btrfs)."""
    try:
        fd = os.open(f"/proc/{m.pid}/map_files/{m.start:x}-{m.end:x}", FLAGS)
    except (FileNotFoundError, ProcessLookupError):
        # its main thread exited (pthread_exit): no map_files of the process's, but
        # the root of a thread that runs on; else unmapped meanwhile
        base = proc_base(m.pid)
        if base == f"/proc/{m.pid}" or m.path.endswith(" (deleted)"):
            raise ProcessGone(m.pid, f"{m.name} is no longer mapped") from None
        fd = _open_in_root(m, base)
    except PermissionError:
        if m.path.endswith(" (deleted)"):
            raise LibraryNotFound(m.name, "deleted since it was mapped, and "
                                  "/proc/PID/map_files needs CAP_SYS_ADMIN") from None
        fd = _open_in_root(m)
    except OSError as e:
        raise LibraryNotFound(m.name, f"cannot open it ({e.strerror})") from None
    opened = _regular(fd, m.name)
    st = opened.stat
    device = (os.major(st.st_dev), os.minor(st.st_dev))
    if st.st_ino != m.inode or device != (m.major, m.minor) and superblock_device(
            opened.fd, m.pid) != (m.major, m.minor):
        opened.close()
        raise LibraryNotFound(m.name, f"the file opened is device {os.major(st.st_dev):x}:"
                              f"{os.minor(st.st_dev):x} inode {st.st_ino}, not the "
                              f"{m.major:x}:{m.minor:x} inode {m.inode} that pid {m.pid} "
                              "maps (replaced, or a file system that shows another "
                              "device in /proc/PID/maps): not trusted")
    return opened


def superblock_device(fd: int, pid: int) -> tuple[int, int] | None:
    """The device of the file system the descriptor is on, as maps and mountinfo
    print it (the superblock's): btrfs's stat gives each subvolume a device of
    its own instead. Found through the descriptor's mount (fdinfo's mnt_id) in
    the process's mount table, or ours."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mount = next(line.split()[1] for line in f if line.startswith("mnt_id:"))
        for table in (f"/proc/{pid}/mountinfo", "/proc/self/mountinfo"):
            with open(table) as f:
                for line in f:
                    fields = line.split(maxsplit=3)
                    if fields[0] == mount:
                        major, minor = fields[2].split(":")
                        return int(major), int(minor)
    except (OSError, StopIteration, IndexError, ValueError):
        pass
    return None


def _open_in_root(m: Mapped, base: str | None = None) -> int:
    """openat2 of the mapped path under the process's root (`base`/root: a
    thread's, where the main thread has exited), no symlink followed."""
    return _openat2_in_root(m.pid, m.path, m.name, base, symlinks=False)


def _openat2_in_root(pid: int, path: str, name: str, base: str | None = None,
                     symlinks: bool = False) -> int:
    try:
        root = os.open(f"{base or f'/proc/{pid}'}/root",
                       os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise ProcessGone(pid) from None
    try:
        how = struct.pack("<QQQ", FLAGS | (0 if symlinks else os.O_NOFOLLOW), 0,
                          RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
                          | (0 if symlinks else RESOLVE_NO_SYMLINKS))
        fd = _libc.syscall(SYS_OPENAT2, root, path.lstrip("/").encode(), how, len(how))
    finally:
        os.close(root)
    if fd < 0:
        err = ctypes.get_errno()
        why = ("a symbolic link on the way: not followed" if err == errno.ELOOP
               else os.strerror(err))
        raise LibraryNotFound(name, f"cannot open it ({why})")
    return fd


def open_in_root(pid: int, path: str) -> OpenedFile:
    """A file by its path in the process's root (a container's), whose symbolic
    links cannot lead out of it (RESOLVE_IN_ROOT): one the process has not
    mapped yet (its libc, before ld.so maps it). Refused unless a regular
    file. What it holds is the process's to choose: use it for that process
    alone."""
    return _regular(_openat2_in_root(pid, path, path, symlinks=True), path)
