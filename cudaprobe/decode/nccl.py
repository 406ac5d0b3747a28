"""NCCL calls for people: bytes moved, and the communicator as rank of ranks.

A collective passes a count of elements of its datatype; `bytes` is count x
the datatype's size (for ncclAllGather the count each rank sends, for
ncclReduceScatter the count each receives, as the call takes it). The
communicator is an opaque handle: its rank and number of ranks are learned
where a traced call made or asked it (ncclCommInitRank*, ncclCommUserRank,
ncclCommCount), or read once from the communicator itself (MemoryReader, for
one made before cudaprobe attached, or by ncclCommSplit); where neither
tells, they are None and the row says "rank unknown".
"""

from __future__ import annotations

import os
from typing import Any, Callable

from cudaprobe.catalogue.enums import enum_name
from cudaprobe.catalogue.functions import NCCL, ArgKind, Function
from cudaprobe.decode.ranks import Ranks
from cudaprobe.errors import CudaprobeError
from cudaprobe.targets.libs import api_of
from cudaprobe.targets.nccl_comm import NCCL_MAGIC, CommLayout, comm_layout
from cudaprobe.targets.procmaps import read_maps

# bytes per element, by ncclDataType_t enumerator
DATATYPE_SIZES = {
    "ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8,
    "ncclUint64": 8, "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8, "ncclBfloat16": 2,
    "ncclFloat8e4m3": 1, "ncclFloat8e5m2": 1,
}
COUNT_ARGS = ("count", "sendcount", "recvcount")
# (rank argument, ranks argument, out-parameter holding the new communicator)
MAKERS = {
    "ncclCommInitRank": ("rank", "nranks", "comm"),
    "ncclCommInitRankConfig": ("rank", "nranks", "comm"),
    "ncclCommInitRankScalable": ("myrank", "nranks", "newcomm"),
}
# calls that tell one thing of a communicator they are given: (out-parameter, which)
ASKERS = {"ncclCommUserRank": ("rank", 0), "ncclCommCount": ("count", 1)}
ENDERS = {"ncclCommDestroy", "ncclCommAbort"}
# what a call does to its thread's open groups (nesting.CallOrder puts the calls
# made between them under the start)
GROUP_STEPS = {"ncclGroupStart": 1, "ncclGroupEnd": -1}
UNKNOWN = "rank unknown"
MAX_RANKS = 1 << 20  # more is no number of ranks: not a communicator
# what reads a communicator's (rank, nranks) from the process: (pid, comm) -> them or None
CommReader = Callable[[int, int], "tuple[int, int] | None"]


def read_comm(mem_fd: int, comm: int, layout: CommLayout) -> tuple[int, int] | None:
    """(rank, nranks) of the communicator at `comm`, read through `mem_fd`
    (/proc/PID/mem), or None where it is not one: no NCCL_MAGIC at its start,
    or a rank that is no rank of so many."""
    try:
        magic = os.pread(mem_fd, 8, comm)
        rank = os.pread(mem_fd, 4, comm + layout.rank_offset)
        nranks = os.pread(mem_fd, 4, comm + layout.nranks_offset)
    except (OSError, OverflowError):
        return None
    if len(magic) < 8 or len(rank) < 4 or len(nranks) < 4 or \
            int.from_bytes(magic, "little") != NCCL_MAGIC:
        return None
    r, n = int.from_bytes(rank, "little", signed=True), int.from_bytes(nranks, "little",
                                                                       signed=True)
    return (r, n) if 0 <= r < n <= MAX_RANKS else None


class MemoryReader:
    """A CommReader: the communicator read from the process's memory, at the
    offsets its libnccl's code says (targets/nccl_comm.py). `mem_of(pid)` gives
    the process's /proc/PID/mem, open (or -1)."""

    def __init__(self, mem_of: Callable[[int], int]) -> None:
        self.mem_of = mem_of
        self._layouts: dict[int, CommLayout | None] = {}

    def layout(self, pid: int) -> CommLayout | None:
        if pid not in self._layouts:
            try:
                libs = [f for f in read_maps(pid) if api_of(f.path) == NCCL]
                # through the mapping: the name is the process's to re-point
                self._layouts[pid] = comm_layout(libs[0].open()) if len(libs) == 1 else None
            except CudaprobeError:
                self._layouts[pid] = None
        return self._layouts[pid]

    def __call__(self, pid: int, comm: int) -> tuple[int, int] | None:
        layout = self.layout(pid)
        fd = self.mem_of(pid) if layout is not None else -1
        return read_comm(fd, comm, layout) if fd >= 0 and layout is not None else None


def element_size(datatype: Any) -> int | None:
    """Bytes per element of a decoded ncclDataType_t (a name, or the number
    where the header names none)."""
    if isinstance(datatype, int):
        datatype = enum_name("ncclDataType_t", datatype)
    return DATATYPE_SIZES.get(datatype) if isinstance(datatype, str) else None


class Communicators:
    """What is known of each process's communicators: (rank, nranks), either
    possibly None."""

    def __init__(self, reader: CommReader | None = None, ranks: Ranks | None = None) -> None:
        self._known: dict[tuple[int, int], list[int | None]] = {}
        self._reader = reader
        self._read: set[tuple[int, int]] = set()  # asked the reader once
        self._ranks = ranks  # told of each communicator known whole: the process's rank

    def of(self, pid: int, comm: int) -> tuple[int | None, int | None]:
        key = (pid, comm)
        known = self._known.get(key)
        if (known is None or None in known) and comm and self._reader is not None \
                and key not in self._read:
            self._read.add(key)
            read = self._reader(pid, comm)
            if read is not None:
                known = self._known[key] = list(read)
        if not known:
            return None, None
        if self._ranks is not None:
            self._ranks.communicator(pid, known[0], known[1])
        return known[0], known[1]

    def learn(self, fn: Function, pid: int, args: dict[str, Any]) -> None:
        """What a successful call of `fn` tells of a communicator."""
        if fn.name in MAKERS:
            rank, nranks, out = MAKERS[fn.name]
            comm = _address(args.get(out))
            if comm:
                self._known[(pid, comm)] = [args.get(rank), args.get(nranks)]
                if self._ranks is not None:
                    self._ranks.communicator(pid, args.get(rank), args.get(nranks))
        elif fn.name in ASKERS:
            out, which = ASKERS[fn.name]
            comm = _address(args.get("comm"))
            if comm and isinstance(args.get(out), int):
                self._known.setdefault((pid, comm), [None, None])[which] = args[out]
        elif fn.name in ENDERS:
            comm = _address(args.get("comm"))
            self._known.pop((pid, comm), None)
            self._read.discard((pid, comm))


def _address(value: Any) -> int:
    return int(value, 16) if isinstance(value, str) else 0


def describe(fn: Function, pid: int, args: dict[str, Any], details: str,
             comms: Communicators | None, say_bytes: Callable[[int], str]) -> str:
    """Add to an NCCL call's decoded `args` its `bytes`, `rank` and `nranks`
    (where it has a count and a communicator), and return its details with
    them: `datatype=ncclFloat32 bytes=4.0 MiB`, `comm=0x... (rank 0 of 2)`.
    `say_bytes` writes a number of bytes for people."""
    if fn.api != NCCL:
        return details
    count = next((args[a] for a in COUNT_ARGS if isinstance(args.get(a), int)), None)
    size = element_size(args.get("datatype"))
    parts = details.split(" ")
    if count is not None and size is not None:
        args["bytes"] = count * size
        parts = [f"{p} bytes={say_bytes(args['bytes'])}" if p.startswith("datatype=")
                 else p for p in parts]
    given = any(a.name == "comm" and a.kind is ArgKind.HANDLE for a in fn.args)
    comm = _address(args.get("comm")) if given else 0
    if comm:
        rank, nranks = comms.of(pid, comm) if comms is not None else (None, None)
        args["rank"], args["nranks"] = rank, nranks
        said = (f"({UNKNOWN})" if rank is None and nranks is None else
                f"(rank {'?' if rank is None else rank} of {'?' if nranks is None else nranks})")
        parts = [f"{p} {said}" if p.startswith("comm=") else p for p in parts]
    return " ".join(parts)
