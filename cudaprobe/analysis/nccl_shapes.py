"""What nccl-tests would call an NCCL operation, and how it counts its bytes.

nccl-tests gives each collective one record (its `struct testColl`): the size
it reports for a call and the factor that turns that size's bandwidth (algbw
= size / time) into the bus bandwidth (busbw), which is comparable with the
speed of the links whatever the collective and the number of ranks n:

| nccl-tests     | NCCL call           | size                 | busbw / algbw |
| -------------- | ------------------- | -------------------- | ------------- |
| all_reduce     | ncclAllReduce       | count x dtype size   | 2(n-1)/n      |
| all_gather     | ncclAllGather       | sendcount x size x n | (n-1)/n       |
| reduce_scatter | ncclReduceScatter   | recvcount x size x n | (n-1)/n       |
| alltoall       | ncclAlltoAll (*)    | count x size x n     | (n-1)/n       |
| gather         | ncclGather          | count x size x n     | (n-1)/n       |
| scatter        | ncclScatter         | count x size x n     | (n-1)/n       |
| broadcast      | ncclBroadcast/Bcast | count x size         | 1             |
| reduce         | ncclReduce          | count x size         | 1             |
| sendrecv       | (**)                | count x size         | 1             |

(*) or a group of one send and one receive of the same size with each other
rank (or every rank): how nccl-tests and PyTorch make all-to-all on NCCL; its
count is a peer's. (**) a group of one send and one receive of the same size,
as a pipeline stage passes to the next and takes from the one before.

A send or a receive made alone counts its bytes with a factor of 1. A group
of several calls of one collective (PyTorch's coalesced all-reduces) is that
collective over their summed size; any other group has a size (the sum of
its calls' bytes) but no bus factor: nccl-tests defines none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cudaprobe.decode.calls import Call
from cudaprobe.decode.nccl import element_size


@dataclass(frozen=True)
class Shape:
    """One kind of operation as nccl-tests reports it."""
    test: str  # nccl-tests' name of it
    times_ranks: bool  # its size is the call's bytes x the number of ranks
    bus: str  # busbw / algbw: "2(n-1)/n", "(n-1)/n", "1", or "" (none defined)

    def size(self, nbytes: int, nranks: int | None) -> int | None:
        """None where it is a multiple of the number of ranks, which is unknown."""
        if not self.times_ranks:
            return nbytes
        return nbytes * nranks if nranks else None

    def bus_factor(self, nranks: int | None) -> float | None:
        if not self.bus or not nranks:
            return None
        return {"2(n-1)/n": 2 * (nranks - 1) / nranks, "(n-1)/n": (nranks - 1) / nranks,
                "1": 1.0}[self.bus]


ALL_REDUCE = Shape("all_reduce", False, "2(n-1)/n")
ALLTOALL = Shape("alltoall", True, "(n-1)/n")
SENDRECV = Shape("sendrecv", False, "1")
MIXED = Shape("", False, "")
SHAPES = {
    "ncclAllReduce": ALL_REDUCE,
    "ncclAllGather": Shape("all_gather", True, "(n-1)/n"),
    "ncclReduceScatter": Shape("reduce_scatter", True, "(n-1)/n"),
    "ncclAlltoAll": ALLTOALL,
    "ncclGather": Shape("gather", True, "(n-1)/n"),
    "ncclScatter": Shape("scatter", True, "(n-1)/n"),
    "ncclBroadcast": Shape("broadcast", False, "1"),
    "ncclBcast": Shape("broadcast", False, "1"),
    "ncclReduce": Shape("reduce", False, "1"),
    "ncclSend": Shape("send", False, "1"),
    "ncclRecv": Shape("recv", False, "1"),
}
# ncclDataType_t -> the name nccl-tests prints for it
TEST_TYPES = {
    "ncclInt8": "int8", "ncclUint8": "uint8", "ncclInt32": "int32", "ncclUint32": "uint32",
    "ncclInt64": "int64", "ncclUint64": "uint64", "ncclFloat16": "half", "ncclFloat32": "float",
    "ncclFloat64": "double", "ncclBfloat16": "bfloat16", "ncclFloat8e4m3": "f8e4m3",
    "ncclFloat8e5m2": "f8e5m2",
}


@dataclass(frozen=True)
class Sized:
    """An operation as a row of the per-size table: what it is, the bytes its
    calls passed, its size as nccl-tests reports it, its count of elements
    and their type."""
    name: str  # the NCCL call, or the group: "ncclGroup[2 ncclSend+2 ncclRecv]"
    shape: Shape
    bytes: int  # count x datatype size, of its calls together
    size: int | None  # None where it needs the number of ranks, unknown
    count: int | None  # elements of `type` in `size`; None where the types differ
    type: str  # nccl-tests' name of the datatype, "mixed", or "?" where unknown


def _type(c: Call) -> str:
    datatype = c.args.get("datatype")
    return TEST_TYPES.get(datatype, str(datatype)) if datatype is not None else "?"


def _count(size: int | None, calls: list[Call], type_: str) -> int | None:
    if size is None or type_ in ("mixed", "?"):
        return None
    per = element_size(calls[0].args.get("datatype"))
    return size // per if per else None


def _group_name(calls: list[Call]) -> str:
    counts: dict[str, int] = {}
    for c in calls:
        counts[c.event] = counts.get(c.event, 0) + 1
    return "ncclGroup[" + "+".join(f"{n} {e}" if n > 1 else e
                                  for e, n in counts.items()) + "]"


def sized(calls: list[Call], nranks: int | None) -> Sized:
    """The row one operation goes in: `calls` are a call made alone, or a
    group's calls on one communicator, in the order they were made."""
    nbytes = [c.args.get("bytes") or 0 for c in calls]
    types = {_type(c) for c in calls}
    type_ = types.pop() if len(types) == 1 else "mixed"
    events = {c.event for c in calls}
    name = calls[0].event if len(calls) == 1 else _group_name(calls)
    if len(calls) == 1:
        shape = SHAPES.get(calls[0].event, MIXED)
    elif events == {"ncclSend", "ncclRecv"} and len(set(nbytes)) == 1:
        shape = _p2p_group(calls, nranks)
        if shape is not MIXED:  # sendrecv, alltoall: the size of one of its calls
            size = shape.size(nbytes[0], nranks)
            return Sized(name, shape, sum(nbytes), size, _count(size, calls, type_), type_)
    elif len(events) == 1 and calls[0].event in SHAPES:
        shape = SHAPES[calls[0].event]
    else:
        shape = MIXED
    sizes = [shape.size(b, nranks) for b in nbytes]
    size = None if None in sizes else sum(sizes)
    return Sized(name, shape, sum(nbytes), size, _count(size, calls, type_), type_)


def _p2p_group(calls: list[Call], nranks: int | None) -> Shape:
    """A group of sends and receives of one size: nccl-tests' sendrecv (one of
    each, as a pipeline stage passes to the next and takes from the one
    before), its alltoall (one of each to every other rank, or every rank:
    as nccl-tests and PyTorch make all-to-all on NCCL), or neither."""
    sends = [c.args.get("peer") for c in calls if c.event == "ncclSend"]
    recvs = [c.args.get("peer") for c in calls if c.event == "ncclRecv"]
    if len(sends) == len(recvs) == 1:
        return SENDRECV
    peers = set(sends)
    if nranks and len(peers) == len(sends) == len(recvs) and peers == set(recvs) \
            and len(peers) >= nranks - 1 and all(_is_rank(p, nranks) for p in peers):
        return ALLTOALL
    return MIXED


def _is_rank(peer: Any, nranks: int) -> bool:
    return isinstance(peer, int) and 0 <= peer < nranks
