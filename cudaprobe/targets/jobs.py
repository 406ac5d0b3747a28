"""Which job a process is part of, for serve's metric labels: its Kubernetes
pod and container, its container's id (Docker, Podman, containerd, CRI-O),
its Slurm job, and the rank its launcher gave it.

Where each comes from, and why it can be believed:
- **The cgroup** (`/proc/PID/cgroup`, written by the kernel): the pod's uid
  (`kubepods-burstable-pod<uid>.slice`, `pod<uid>`), the container's id
  (`cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`,
  `libpod-<id>.scope`, or a bare 64-hex level), the Slurm job
  (`job_<id>`). A process may create cgroups below its own where they were
  delegated to it, never above: a pod counts only under the kubelet's top
  level, a job only under slurm's, and nothing below a container's level or
  a job's (parse_cgroup), so a level a process made up names no one else's
  pod or job. (One made under a user's own delegated slice can give that
  user's own process a container id, nothing more.)
- **The kubelet's log directories** (`/var/log/pods/<namespace>_<pod>_<uid>`
  and `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`, made by
  the kubelet, root's): the pod's namespace and name by its uid, the
  container's name by its id. Names that are not what Kubernetes allows
  (lower-case letters, digits, `-`, `.`) are not used.
- **The environment** the process was started with (`/proc/PID/environ`),
  which the process chose: only the rank is read from it, as trace's rows
  have it (decode.ranks.launcher_rank: `RANK`, as torchrun sets it, else
  `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID`; a number, below the
  world size where one is set), from the first MiB.

Each process's files are opened once, by a descriptor of its /proc
directory (a pid reused meanwhile is a new process: its reads fail), each
read bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator

JOB_LABELS = ("k8s_namespace", "k8s_pod", "k8s_container", "container_id", "slurm_job", "rank")
NO_JOB = ("",) * len(JOB_LABELS)
# OpenTelemetry's names for the same (semantic conventions where they have one)
JOB_ATTRIBUTES = ("k8s.namespace.name", "k8s.pod.name", "k8s.container.name", "container.id",
                  "slurm.job.id", "rank")
KUBELET_LOGS = "/var/log"  # its pods/ and containers/ directories
CGROUP_MAX = 16 << 10
RESCAN_S = 10.0  # the kubelet's directories listed again, at most this often, on a miss
MAX_KEPT = 65_536  # processes whose labels are kept; past it, the table starts again

_POD = re.compile(r"(?:kubepods.*-pod|^pod)([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_]"
                  r"[0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker|libpod)-)?([0-9a-f]{64})(?:\.scope)?$")
_SLURM = re.compile(r"^job_([0-9]{1,12})$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_POD_DIR = re.compile(r"^([^_]+)_([^_]+)_([0-9a-f-]{36})$")
_CONTAINER_LOG = re.compile(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$")


def parse_cgroup(text: str) -> tuple[str, str, str]:
    """(pod uid, container id, Slurm job id) from /proc/PID/cgroup's text, each
    "" where there is none: the unified hierarchy's path ("0::"), else each v1
    hierarchy's in turn, read from the root down.

    What a process could have made below its own cgroup counts for nothing:
    a pod only under a top level of the kubelet's (`kubepods...`,
    `kubelet...`), a Slurm job only under slurm's own level (`slurm`,
    `slurmstepd.scope`), each the first such level, and nothing below a
    container's level or a job's. Read from inside a cgroup namespace (serve
    in a pod of its own), a path outside it starts with `..` levels up to
    the common ancestor: the rules apply from there."""
    paths = []
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if sep:
            if controllers == "":
                paths.insert(0, path)
            else:
                paths.append(path)
    for path in paths:
        levels = [level for level in path.split("/") if level]
        while levels and levels[0] == "..":  # read from a cgroup namespace of our own (a
            levels.pop(0)                    # pod's): the path from our common ancestor
        pod = container = job = ""
        kubelet = bool(levels) and levels[0].startswith(("kubepods", "kubelet"))
        slurm = False
        for level in levels:
            if kubelet and not pod and (m := _POD.search(level)):
                pod = m.group(1).replace("_", "-")
            elif m := _CONTAINER.match(level):
                container = m.group(1)
                break
            elif slurm and (m := _SLURM.match(level)):
                job = m.group(1)
                break
            elif level in ("slurm", "slurmstepd.scope"):
                slurm = True
        if pod or container or job:
            return pod, container, job
    return "", "", ""


# (rank variable, size variable), the first present wins
LAUNCHER_VARIABLES = (
    (b"RANK", b"WORLD_SIZE"),
    (b"OMPI_COMM_WORLD_RANK", b"OMPI_COMM_WORLD_SIZE"),
    (b"PMI_RANK", b"PMI_SIZE"),
    (b"SLURM_PROCID", b"SLURM_NTASKS"),
)
MAX_ENVIRON = 1 << 20  # bytes of /proc/PID/environ read at most


def _number(value: bytes | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) < 10 else None


def environment(environ: bytes) -> dict[bytes, bytes]:
    """A process's environment block (NUL-separated NAME=value) as a dict: a
    name given twice has its first value, as getenv() gives."""
    env: dict[bytes, bytes] = {}
    for item in environ.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env.setdefault(name, value)
    return env


def launcher_rank(environ: bytes) -> tuple[int, int | None] | None:
    """(rank, world size or None) from a process's environment block
    (NUL-separated NAME=value), or None where no launcher set a rank."""
    env = environment(environ)
    for rank_name, size_name in LAUNCHER_VARIABLES:
        rank, size = _number(env.get(rank_name)), _number(env.get(size_name))
        if rank is not None and (size is None or rank < size):
            return rank, size
    return None


def rank_of(environ: bytes) -> str:
    """The launcher's rank from an environment block (NUL-separated), or ""."""
    found = launcher_rank(environ)
    return "" if found is None else str(found[0])


class KubeletNames:
    """Pods' namespaces and names by uid, containers' names by id, from the
    kubelet's log directories under `root`; listed again on a miss, at most
    each RESCAN_S."""

    def __init__(self, root: str = KUBELET_LOGS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.clock = clock
        self._pods: dict[str, tuple[str, str]] = {}
        self._containers: dict[str, str] = {}
        self._listed: float | None = None

    def pod(self, uid: str) -> tuple[str, str]:
        if uid not in self._pods:
            self._list()
        return self._pods.get(uid, ("", ""))

    def container(self, cid: str) -> str:
        if cid not in self._containers:
            self._list()
        return self._containers.get(cid, "")

    def _list(self) -> None:
        now = self.clock()
        if self._listed is not None and now - self._listed < RESCAN_S:
            return
        self._listed = now
        pods, containers = {}, {}
        for name in _listing(os.path.join(self.root, "pods")):
            m = _POD_DIR.match(name)
            if m and _NAME.match(m.group(1)) and _NAME.match(m.group(2)):
                pods[m.group(3)] = (m.group(1), m.group(2))
        for name in _listing(os.path.join(self.root, "containers")):
            m = _CONTAINER_LOG.match(name)
            if m and _NAME.match(m.group(3)):
                containers[m.group(4)] = m.group(3)
        self._pods, self._containers = pods, containers


@contextlib.contextmanager
def proc_dir(pid: int) -> Iterator[int | None]:
    """A descriptor of /proc/PID, or None where it cannot be opened: what is
    read through it is that process's (a pid reused meanwhile is another
    process, whose files the descriptor does not reach)."""
    try:
        fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def read_proc(pid: int, *files: tuple[str, int]) -> list[bytes]:
    """Each (name, limit) of `files`: at most `limit` bytes of /proc/PID/name,
    every one through one descriptor of /proc/PID (proc_dir); b"" for one
    that cannot be read."""
    with proc_dir(pid) as fd:
        return [b""] * len(files) if fd is None else [_read_at(fd, name, limit)
                                                      for name, limit in files]


# /proc/PID/syscall of a process inside execve(2) or execveat(2): the call's
# number, then its arguments; the field its `envp` is (x86-64: execve(path,
# argv, envp), execveat(fd, path, argv, envp, flags))
EXEC_ENVP = {b"59": 3, b"322": 4}
MAX_ENV_VARS = 4096  # pointers of an exec's envp read at most


def exec_environment(dir_fd: int) -> bytes | None:
    """The environment the process of `dir_fd` (its /proc/PID: proc_dir) is
    giving its new program, if it is inside execve, as an environment block
    (NUL-separated), read from the call's `envp` in its memory, bounded; None
    where it is not in an exec. A process the gate holds at its exec shows
    its old image in /proc/PID/environ until the exec is done: a launcher's
    environment, not the RANK it set for the program. The memory is the
    process's to change: what is read is only labels, checked as any
    environment is."""
    fields = _read_at(dir_fd, "syscall", 256).split()
    where = EXEC_ENVP.get(fields[0]) if fields else None
    if where is None or len(fields) <= where:
        return None
    try:
        envp = int(fields[where], 16)
        mem = os.open("mem", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except (ValueError, OSError):
        return None
    try:
        return _strings_at(mem, envp)
    finally:
        os.close(mem)


def _strings_at(mem: int, array: int) -> bytes | None:
    """The NUL-terminated strings a NULL-ended array of pointers at `array`
    points to, joined as an environment block; at most MAX_ENV_VARS of them
    and MAX_ENVIRON bytes in all, each whole; None where the memory cannot
    be read."""
    try:
        pointers = os.pread(mem, 8 * MAX_ENV_VARS, array)
    except OSError:
        return None
    out, left = [], MAX_ENVIRON
    for (p,) in struct.iter_unpack("<Q", pointers[:len(pointers) // 8 * 8]):
        if p == 0 or left <= 0:
            break
        try:
            text = os.pread(mem, min(left, 1 << 17), p)  # MAX_ARG_STRLEN at most
        except OSError:
            break
        end = text.find(b"\0")
        if end < 0:  # longer than what is left to read: none of it (never a value cut)
            break
        out.append(text[:end])
        left -= end + 1
    return b"\0".join(out) + b"\0" if out else b""


def _read_at(dir_fd: int, name: str, limit: int) -> bytes:
    """At most `limit` bytes of `name` in the directory `dir_fd`; b"" where it
    cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return b""
    chunks, left = [], limit
    try:
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return b""
    finally:
        os.close(fd)
    return b"".join(chunks)


def _listing(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.name for e in entries]
    except OSError:
        return []


class Jobs:
    """`of(pid)`: the process's JOB_LABELS values, read once per process.

    A process's calls are decoded after it made them, and a short one may have
    exited by then, its /proc files gone: `refresh(pid)` reads them earlier,
    as the process is given its probes (held at its open, or at a look), and
    is called from the gate's thread too."""

    def __init__(self, kubelet_logs: str = KUBELET_LOGS) -> None:
        self.names = KubeletNames(kubelet_logs)
        self._kept: dict[int, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def of(self, pid: int) -> tuple[str, ...]:
        labels = self._kept.get(pid)
        return self.refresh(pid) if labels is None else labels

    def refresh(self, pid: int) -> tuple[str, ...]:
        """The process's labels read now: a new process, maybe under a pid used
        before. One already gone keeps those read before (a short program's
        labels read at its exec, then told of again once it has exited: its
        calls, decoded later, are still its job's); forget() ends them."""
        with self._lock:
            labels = self._read(pid)
            if labels is None:
                labels = self._kept.get(pid, NO_JOB)
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            self._kept[pid] = labels
        return labels

    def forget(self, pid: int) -> None:
        """The process has exited: its pid may come back as another's."""
        with self._lock:
            self._kept.pop(pid, None)

    def _read(self, pid: int) -> tuple[str, ...] | None:
        """None: the process is gone."""
        with proc_dir(pid) as fd:
            if fd is None:
                return None
            cgroup = _read_at(fd, "cgroup", CGROUP_MAX)
            # held at its exec, it shows its old image: the environment it is given
            environ = exec_environment(fd)
            if environ is None:
                environ = _read_at(fd, "environ", MAX_ENVIRON)
        pod, container, job = parse_cgroup(cgroup.decode("utf-8", "replace"))
        namespace, pod_name = self.names.pod(pod) if pod else ("", "")
        container_name = self.names.container(container) if pod and container else ""
        return (namespace, pod_name, container_name, container[:12], job, rank_of(environ))
