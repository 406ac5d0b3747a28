"""NCCL calls decoded for people: bytes of a count of a datatype, and the
communicator as rank of ranks, learned from the calls that made or asked it."""

from __future__ import annotations

from cudaprobe.catalogue.functions import BY_NAME
from cudaprobe.decode.calls import decode_event
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.nccl import Communicators, element_size
from cudaprobe.probe.plan import Probe

from .eventbuild import make_event

NAMES = ("ncclCommInitRank", "ncclAllReduce", "ncclCommDestroy", "ncclCommSplit",
         "ncclCommUserRank", "ncclCommCount", "ncclAllGather")
PROBES = [Probe(i, name, BY_NAME[name]) for i, name in enumerate(NAMES)]
ID = {name: i for i, name in enumerate(NAMES)}
COMM, OTHER, SPLIT = 0x5500_0000_1000, 0x5500_0000_2000, 0x5500_0000_3000
FLOAT32, BFLOAT16, SUM = 7, 9, 0


def call(handles: KernelHandles, name: str, args=(), outs=(), ret: int = 0, pid: int = 42):
    return decode_event(make_event(args, outs, ret=ret, pid=pid, func_id=ID[name]), PROBES, 0,
                        handles=handles)


def all_reduce(handles: KernelHandles, comm: int, pid: int = 42, count: int = 1 << 20):
    # sendbuff, recvbuff, count, datatype, op, comm, stream (the 7th word: on the stack)
    return call(handles, "ncclAllReduce", (0x1000, 0x2000, count, FLOAT32, SUM, comm, 0x77),
                ret=0, pid=pid)


def test_a_communicator_made_by_a_traced_call_is_its_rank_of_ranks():
    h = KernelHandles()
    # ncclCommInitRank(&comm, nranks=4, id (on the stack), rank=3): comm read at exit
    made = call(h, "ncclCommInitRank", (0x7FFC_0000, 4, 3), outs=(COMM,))
    assert made.args["comm"] == hex(COMM) and "(rank" not in made.details
    c = all_reduce(h, COMM)
    assert (c.args["rank"], c.args["nranks"], c.args["bytes"]) == (3, 4, 4 << 20)
    assert c.args["stream"] == "0x77"
    assert (f"count=1048576 datatype=ncclFloat32 bytes=4.0 MiB op=ncclSum "
            f"comm={COMM:#x} (rank 3 of 4) stream=0x77") in c.details
    # another process's communicator at the same address is another communicator
    assert all_reduce(h, COMM, pid=43).args["rank"] is None
    # destroyed: an address used again is not that communicator
    call(h, "ncclCommDestroy", (COMM,))
    c = all_reduce(h, COMM)
    assert (c.args["rank"], c.args["nranks"]) == (None, None)
    assert f"comm={COMM:#x} (rank unknown)" in c.details


def test_a_failed_init_teaches_nothing():
    h = KernelHandles()
    call(h, "ncclCommInitRank", (0x7FFC_0000, 4, 3), outs=(COMM,), ret=1)
    assert all_reduce(h, COMM).args["rank"] is None


def test_asking_the_communicator_teaches_its_rank_and_size():
    h = KernelHandles()
    # ncclCommSplit(comm, color, key, &newcomm, config): its place in the new one is
    # not in its arguments; ncclCommUserRank and ncclCommCount say it
    call(h, "ncclCommSplit", (OTHER, 0, 1, 0x7FFC_0010, 0), outs=(SPLIT,))
    assert all_reduce(h, SPLIT).args["rank"] is None
    asked = call(h, "ncclCommUserRank", (SPLIT, 0x7FFC_0020), outs=(1,))
    assert asked.args["rank"] == 1 and "(rank 1 of ?)" in asked.details
    call(h, "ncclCommCount", (SPLIT, 0x7FFC_0024), outs=(2,))
    c = call(h, "ncclAllGather", (0x1000, 0x2000, 10, BFLOAT16, SPLIT, 0x77))
    assert (c.args["rank"], c.args["nranks"], c.args["bytes"]) == (1, 2, 20)


def test_a_reader_names_a_communicator_made_before_the_attach_once():
    asked = []

    def reader(pid: int, comm: int):
        asked.append((pid, comm))
        return (0, 8) if comm == COMM else None

    comms = Communicators(reader)
    assert comms.of(42, COMM) == (0, 8)
    assert comms.of(42, COMM) == (0, 8)
    assert comms.of(42, OTHER) == (None, None)
    assert comms.of(42, OTHER) == (None, None)
    assert asked == [(42, COMM), (42, OTHER)]


def test_element_sizes():
    assert element_size("ncclFloat16") == 2 and element_size(FLOAT32) == 4
    assert element_size(12345) is None and element_size(None) is None
