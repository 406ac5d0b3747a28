"""stats --by collective on decoded rows: a row per operation, size and rank
with nccl-tests' sizes and bandwidths, groups, and the waits measured from
the ranks' kernel starts on the GPU."""

from __future__ import annotations

import io
import json

import pytest

from cudaprobe.analysis.nccl import collective_stats
from cudaprobe.analysis.nccl_waits import covered
from cudaprobe.analysis.stats import StatsReport
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import ApiCall, GpuWork
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.table import make_console

US, MS, S = 1_000, 1_000_000, 1_000_000_000
MIB = 1 << 20
CATEGORY = {"ncclAllReduce": "collective", "ncclBcast": "collective", "ncclAllGather": "collective",
            "ncclReduceScatter": "collective", "ncclBroadcast": "collective",
            "ncclReduce": "collective", "ncclAlltoAll": "collective", "ncclGather": "collective",
            "ncclScatter": "collective", "ncclSend": "p2p", "ncclRecv": "p2p",
            "ncclGroupStart": "group", "ncclGroupEnd": "group"}
COUNT_ARG = {"ncclAllGather": "sendcount", "ncclReduceScatter": "recvcount"}
SIZES = {"ncclFloat32": 4, "ncclBfloat16": 2, "ncclInt8": 1, "ncclFloat64": 8}


def kernel(pid: int, start: int, end: int) -> GpuWork:
    return GpuWork(pid, "kernel", start, end, 0, 1, 7, 1, "ncclDevKernel", 0,
                   ApiCall(pid, start, start + 1, "cuLaunchKernelEx"))


def nccl(event: str, ts: int, pid: int = 10, rank: int | None = 0, nranks: int | None = 2,
         count: int = MIB // 4, datatype: str = "ncclFloat32", comm: str = "0xc0",
         ret: int = 0, gpu: tuple[int, int] | None = None, duration: int = 5 * US,
         peer: int | None = None) -> Call:
    args = {} if CATEGORY[event] == "group" else {
        COUNT_ARG.get(event, "count"): count, "datatype": datatype,
        "bytes": count * SIZES[datatype], "comm": comm, "rank": rank, "nranks": nranks}
    if peer is not None:
        args["peer"] = peer
    c = Call(ts / 1e6, ts, pid, pid, "python", event, "nccl", CATEGORY[event], duration, ret,
             "ncclSuccess" if ret == 0 else "ncclInvalidArgument", args, "")
    if gpu is not None:
        c.gpu = [kernel(pid, *gpu)]
    return c


def rows_of(stats) -> dict[tuple, dict]:
    return {(r["operation"], r["rank"], r["size"]): r for r in stats.to_dict()["collectives"]}


def rendered(stats) -> str:
    out = io.StringIO()
    render_stats(StatsReport([], nccl=stats), make_console(out))
    return out.getvalue()


# nccl-tests' own arithmetic, as its src/*.cu write it: for a call of `param`
# elements (the count the NCCL call takes) of `typesize` bytes on n ranks that
# took `sec`, (the size it prints, algbw, busbw) in bytes and GB/s
NCCL_TESTS = {
    "ncclAllReduce": lambda p, t, s, n: (p * t, p * t / 1e9 / s, p * t / 1e9 / s * 2 * (n - 1) / n),
    "ncclAllGather": lambda p, t, s, n: (p * t * n, p * t * n / 1e9 / s,
                                         p * t * n / 1e9 / s * (n - 1) / n),
    "ncclReduceScatter": lambda p, t, s, n: (p * t * n, p * t * n / 1e9 / s,
                                             p * t * n / 1e9 / s * (n - 1) / n),
    "ncclAlltoAll": lambda p, t, s, n: (p * t * n, p * n * t / 1e9 / s,
                                        p * n * t / 1e9 / s * (n - 1) / n),
    "ncclGather": lambda p, t, s, n: (p * t * n, p * t * n / 1e9 / s,
                                      p * t * n / 1e9 / s * (n - 1) / n),
    "ncclScatter": lambda p, t, s, n: (p * t * n, p * t * n / 1e9 / s,
                                       p * t * n / 1e9 / s * (n - 1) / n),
    "ncclBroadcast": lambda p, t, s, n: (p * t, p * t / 1e9 / s, p * t / 1e9 / s),
    "ncclReduce": lambda p, t, s, n: (p * t, p * t / 1e9 / s, p * t / 1e9 / s),
    "ncclSend": lambda p, t, s, n: (p * t, p * t / 1e9 / s, p * t / 1e9 / s),
}


def test_sizes_and_bandwidths_are_nccl_tests_own():
    """Every collective, on 2, 3, 4 and 8 ranks, in two datatypes: the size, the
    count, algbw and busbw of its row equal what nccl-tests' formulas give
    for the same call and GPU time (each rank's kernels started together)."""
    checked = 0
    for event, formula in NCCL_TESTS.items():
        for n in (2, 3, 4, 8):
            for datatype, param in (("ncclFloat32", 3 * MIB), ("ncclBfloat16", 1000)):
                took = 250 * US + n
                calls = [nccl(event, 0, pid=100 + r, rank=r, nranks=n, count=param,
                              datatype=datatype, gpu=(10 * US, 10 * US + took))
                         for r in range(n)]
                stats = collective_stats(calls)
                size, algbw, busbw = formula(param, SIZES[datatype], took / 1e9, n)
                assert len(stats.rows) == n
                for row in stats.rows:
                    assert (row.size, row.count, row.timed_by) == (size, size // SIZES[datatype],
                                                                   "gpu"), (event, n)
                    assert row.time_ns == took
                    assert row.algbw == pytest.approx(algbw, rel=1e-12)
                    assert row.busbw == pytest.approx(busbw, rel=1e-12), (event, n)
                checked += 1
    assert checked == len(NCCL_TESTS) * 8


def test_a_row_per_size_so_small_calls_do_not_set_the_large_ones_bandwidth():
    """All-reduces of 4 KiB, 4 MiB and 64 MiB on two ranks: a row each, each
    with its own time and busbw (one median across the sizes, as before,
    gave the 64 MiB calls a bandwidth none of them had)."""
    calls, t = [], 0
    took = {4 << 10: 20 * US, 4 * MIB: 40 * US, 64 * MIB: 300 * US}
    for _ in range(5):
        for size, ns in took.items():
            for rank in (0, 1):
                calls.append(nccl("ncclAllReduce", t, pid=10 + rank, rank=rank,
                                  count=size // 4, gpu=(t + 10 * US, t + 10 * US + ns)))
            t += MS
    rows = rows_of(collective_stats(calls))
    assert len(rows) == 6
    for size, ns in took.items():
        for rank in (0, 1):
            r = rows[("ncclAllReduce", rank, size)]
            assert (r["calls"], r["count"], r["type"], r["time_ns"]) == (5, size // 4, "float", ns)
            assert r["busbw_gbps"] == round(size / ns * 2 * (2 - 1) / 2, 3)
            assert (r["nccl_tests"], r["bus_factor"]) == ("all_reduce", "2(n-1)/n")


def test_waits_come_from_the_gpu_not_the_host():
    """Rank 1 comes 30 ms late to each of 30 iterations of 5 collectives;
    rank 0's host runs ahead, queuing every call at once, so that the spread
    of the ranks' entry times grows with every call (summed, tens of times
    the run). On the GPU, rank 0's first kernel of an iteration starts 30 ms
    before rank 1's and runs until it has: rank 0 waited 30 x 30 ms, rank 1
    nothing, rank 1 is the straggler; the transfer time leaves the waits out,
    the kernel time keeps them."""
    calls, t = [], 0
    transfer = 100 * US
    host_spread = 0
    for it in range(30):
        for k in range(5):
            n = it * 5 + k
            late = 30 * MS if k == 0 else 0
            r0 = t  # rank 0's kernel starts when the previous one ended
            r1 = t + late
            end = r1 + transfer
            calls.append(nccl("ncclAllReduce", n * US, pid=10, rank=0, gpu=(r0, end + 2 * US)))
            calls.append(nccl("ncclAllReduce", r1 - 5 * US, pid=11, rank=1, gpu=(r1, end)))
            host_spread += r1 - 5 * US - n * US
            t = end + 10 * US
    run = (0, t + MS)
    assert host_spread > 30 * (run[1] - run[0])
    stats = collective_stats(calls, run)
    (waits,) = stats.waits
    ranks = {r.rank: r for r in waits.ranks}
    assert (waits.matched, waits.measured) == (150, 150)
    assert ranks[0].waited_ns == 30 * 30 * MS
    assert ranks[1].waited_ns == 0
    # the other 120 started on both GPUs at once: nobody was last
    assert (ranks[1].last, ranks[0].last) == (30, 0)
    assert ranks[1].caused_ns == 30 * 30 * MS and ranks[1].max_ns == 30 * MS
    assert waits.straggler is ranks[1]
    assert all(r.waited_ns <= run[1] - run[0] for r in waits.ranks)
    (row0,) = [r for r in stats.rows if r.rank == 0]
    (row1,) = [r for r in stats.rows if r.rank == 1]
    assert row0.time_ns == transfer + 2 * US and row1.time_ns == transfer
    assert row0.to_dict()["kernel_avg_ns"] == (30 * 30 * MS + 150 * (transfer + 2 * US)) // 150
    document = json.loads(json.dumps(stats.to_dict()))
    assert document["waits"][0]["straggler"] == 1
    assert document["waits"][0]["clock"] == "CLOCK_MONOTONIC"
    assert [r["waited_ns"] for r in document["waits"][0]["ranks"]] == [900 * MS, 0]
    text = rendered(stats)
    assert "straggler: rank 1 (its kernel started last in 30 of 150; the others waited " \
           "for it 900.00ms, in all)" in text


def test_a_wait_is_counted_once_and_never_beyond_the_run():
    """Kernels of one communicator on two streams waiting at once count once;
    a rank whose kernel had ended before the last one started did not wait (a
    small send NCCL buffered); a record stamped after the run ends is cut at
    its end."""
    calls = [
        nccl("ncclAllReduce", 0, pid=10, rank=0, gpu=(0, 50 * MS)),
        nccl("ncclAllReduce", 0, pid=11, rank=1, gpu=(40 * MS, 50 * MS)),
        nccl("ncclAllReduce", 1, pid=10, rank=0, gpu=(10 * MS, 60 * MS)),
        nccl("ncclAllReduce", 1, pid=11, rank=1, gpu=(50 * MS, 60 * MS)),
        # a send that ended before its receive began: no wait
        nccl("ncclSend", 2, pid=10, rank=0, gpu=(70 * MS, 71 * MS), count=4),
        nccl("ncclRecv", 2, pid=11, rank=1, gpu=(80 * MS, 81 * MS), count=4),
        # the run ends at 100 ms: a kernel said to start at 90 ms, the other at 300 ms
        nccl("ncclAllReduce", 3, pid=10, rank=0, gpu=(90 * MS, 310 * MS)),
        nccl("ncclAllReduce", 3, pid=11, rank=1, gpu=(300 * MS, 310 * MS)),
    ]
    stats = collective_stats(calls, (0, 100 * MS))
    (waits,) = stats.waits
    ranks = {r.rank: r for r in waits.ranks}
    # [0, 40), [10, 50) and [90, 100): 60 ms, where their sum is 90
    assert ranks[0].waited_ns == 60 * MS <= 100 * MS
    assert covered([(0, 40), (10, 50), (90, 100)]) == 60
    assert ranks[1].last == 4
    assert ranks[1].max_ns == 40 * MS
    rows = rows_of(stats)
    send, recv = rows[("ncclSend", 0, 16)], rows[("ncclRecv", 1, 16)]
    assert (send["time_ns"], recv["time_ns"]) == (MS, MS)  # whole kernels: neither waited


def test_a_rank_traced_from_later_on_is_matched_by_its_gpu_work():
    """cudaprobe attached to rank 1 three operations after rank 0 (or rank 0
    made three before rank 1's trace began): the n-th operation of each is
    not the same one; their kernels, which overlap, say which is."""
    calls, t = [], 0
    for n in range(40):
        size = (4 << 10) if n % 2 else (4 * MIB)
        late = 5 * MS if n % 10 == 0 else 0
        calls.append(nccl("ncclAllReduce", t, pid=10, rank=0, count=size // 4,
                          gpu=(t, t + late + 100 * US)))
        if n >= 3:
            calls.append(nccl("ncclAllReduce", t, pid=11, rank=1, count=size // 4,
                              gpu=(t + late, t + late + 100 * US)))
        t += 10 * MS
    (waits,) = collective_stats(calls, (0, t)).waits
    assert (waits.matched, waits.measured) == (37, 37)
    ranks = {r.rank: r for r in waits.ranks}
    assert ranks[0].waited_ns == 3 * 5 * MS  # at 10, 20 and 30: 0 came before the attach
    assert ranks[1].last == 3 and ranks[0].last == 0


def test_with_ranks_of_a_communicator_untraced_the_kernel_is_the_time():
    """Two ranks of a communicator of 4 traced (the others on another host):
    their waits are among them, but the last of the four to start may be
    one not seen: each row's time is its whole kernel, as without the others."""
    calls = [nccl("ncclAllReduce", 0, pid=10 + r, rank=r, nranks=4,
                  gpu=(r * MS, 5 * MS)) for r in (0, 1)]
    stats = collective_stats(calls, (0, 10 * MS))
    assert [(r.rank, r.timed_by, r.time_ns) for r in stats.rows] == [(0, "kernel", 5 * MS),
                                                                    (1, "kernel", 4 * MS)]
    (waits,) = stats.waits
    assert [(r.rank, r.waited_ns, r.last) for r in waits.ranks] == [(0, MS, 0), (1, 0, 1)]
    assert "2 of its 4 ranks traced: waits among them" in rendered(stats)


def test_groups_in_the_size_table():
    """A group of one call is that call (its kernels are on the ncclGroupEnd);
    one send and one receive, nccl-tests' sendrecv; a send and a receive with
    every rank, its alltoall (the size a peer's x n); several all-reduces, one
    all-reduce of their summed size; a mixed group, a size and no bus factor;
    a group over two communicators, no GPU time (whose kernel is whose is not
    known)."""
    calls, t = [], 0

    def group(pid: int, rank: int, members: list[tuple], took: int, n: int = 2) -> None:
        nonlocal t
        calls.append(nccl("ncclGroupStart", t, pid=pid))
        for i, (event, kw) in enumerate(members):
            calls.append(nccl(event, t + (i + 1) * US, pid=pid, rank=rank, nranks=n, **kw))
        end = t + (len(members) + 1) * US
        calls.append(nccl("ncclGroupEnd", end, pid=pid, gpu=(end + US, end + US + took)))

    for rank in (0, 1):
        pid, peer = 10 + rank, 1 - rank
        t = 0
        group(pid, rank, [("ncclAllReduce", {"count": 1024})], 10 * US)
        t = MS
        group(pid, rank, [("ncclSend", {"peer": peer}), ("ncclRecv", {"peer": peer})], 20 * US)
        t = 2 * MS
        group(pid, rank, [(e, {"peer": p, "count": 256}) for p in (0, 1)
                          for e in ("ncclSend", "ncclRecv")], 30 * US)
        t = 3 * MS
        group(pid, rank, [("ncclAllReduce", {"count": 100 * (i + 1)}) for i in range(3)],
              40 * US)
        t = 4 * MS
        group(pid, rank, [("ncclAllReduce", {"count": 8}),
                          ("ncclAllGather", {"count": 8, "datatype": "ncclBfloat16"})], 50 * US)
        t = 5 * MS
        group(pid, rank, [("ncclAllReduce", {"count": 8}),
                          ("ncclAllReduce", {"count": 8, "comm": "0xd0"})], 60 * US)
    rows = rows_of(collective_stats(calls))
    for rank in (0, 1):
        one = rows[("ncclAllReduce", rank, 4096)]
        assert (one["calls"], one["time_ns"], one["nccl_tests"]) == (1, 10 * US, "all_reduce")
        sr = rows[("ncclGroup[ncclSend+ncclRecv]", rank, MIB)]
        assert (sr["nccl_tests"], sr["time_ns"], sr["busbw_gbps"]) == (
            "sendrecv", 20 * US, round(MIB / (20 * US), 3))
        a2a = rows[("ncclGroup[2 ncclSend+2 ncclRecv]", rank, 2 * 1024)]
        assert (a2a["nccl_tests"], a2a["count"], a2a["type"]) == ("alltoall", 512, "float")
        assert a2a["busbw_gbps"] == round(2048 / (30 * US) * 1 / 2, 3)
        co = rows[("ncclGroup[3 ncclAllReduce]", rank, 600 * 4)]
        assert (co["nccl_tests"], co["count"], co["time_ns"]) == ("all_reduce", 600, 40 * US)
        mixed = rows[("ncclGroup[ncclAllReduce+ncclAllGather]", rank, 32 + 16)]
        assert (mixed["nccl_tests"], mixed["type"], mixed["count"], mixed["busbw_gbps"]) == (
            None, "mixed", None, None)
        assert mixed["algbw_gbps"] == round(48 / (50 * US), 3)
        # over two communicators: an operation on each, neither timed on the GPU
        split = [r for k, r in rows.items() if k == ("ncclAllReduce", rank, 32)]
        assert [(r["calls"], r["timed_by"]) for r in split] == [(2, "host")]


def test_time_comes_from_the_gpu_else_the_kernel_else_the_host():
    calls = [nccl("ncclAllReduce", 0, pid=10, rank=0, gpu=(US, 101 * US), duration=7 * US),
             nccl("ncclAllReduce", MS, pid=10, rank=0, ret=4, duration=3 * US),  # failed
             nccl("ncclBroadcast", 2 * MS, pid=10, rank=0, duration=9 * US)]
    stats = collective_stats(calls)
    rows = rows_of(stats)
    ar = rows[("ncclAllReduce", 0, MIB)]
    # one rank traced: its whole kernel, waits and all; the failed call is in no time
    assert (ar["calls"], ar["failed"], ar["timed_by"], ar["timed_calls"], ar["time_ns"]) == (
        2, 1, "kernel", 1, 100 * US)
    assert ar["host_avg_ns"] == 7 * US
    bc = rows[("ncclBroadcast", 0, MIB)]
    # no GPU time: the host's, which is NCCL queuing the work: no bandwidth
    assert (bc["timed_by"], bc["time_ns"], bc["algbw_gbps"], bc["busbw_gbps"]) == (
        "host", 9 * US, None, None)
    assert stats.waits == []  # one process
    text = rendered(stats)
    assert "TIMED BY: gpu = from the last rank's kernel start" in text
    assert "BUSBW GB/s" in text and "TIME (us)" in text


def test_without_gpu_time_no_wait_is_given():
    """Two ranks traced without --gpu-time: their host entry times are not
    turned into waits; the table says waits need --gpu-time, the JSON has
    none."""
    calls = []
    for n in range(10):
        calls.append(nccl("ncclAllReduce", n * US, pid=10, rank=0))
        calls.append(nccl("ncclAllReduce", n * 30 * MS, pid=11, rank=1))
    stats = collective_stats(calls, (0, S))
    (waits,) = stats.to_dict()["waits"]
    assert (waits["matched"], waits["measured"], waits["straggler"]) == (10, 0, None)
    assert all(r["waited_ns"] is None and r["caused_ns"] is None for r in waits["ranks"])
    text = rendered(stats)
    assert "Waits: not measured: they need --gpu-time" in text
    assert "straggler" not in text
    # GPU time on one rank only: that communicator's waits are not measured either
    calls[0].gpu = [kernel(10, 0, MS)]
    text = rendered(collective_stats(calls, (0, S)))
    assert "Waits: communicator of 2 ranks #0: none of its 10 operations seen on every " \
           "rank had GPU time on every rank" in text
    assert "WAITED" not in text


def test_a_call_made_inside_another_is_counted_once():
    # ncclBcast calls ncclBroadcast: two probes fire, one operation
    outer = nccl("ncclBcast", 0, duration=30 * US, gpu=(40 * US, 140 * US))
    inner = nccl("ncclBroadcast", 5 * US, duration=20 * US)
    calls = [outer, inner, nccl("ncclBcast", 0, pid=11, rank=1, duration=30 * US,
                                gpu=(40 * US, 140 * US)),
             nccl("ncclBroadcast", 5 * US, pid=11, rank=1, duration=20 * US)]
    stats = collective_stats(calls)
    assert [(r.name, r.calls) for r in stats.rows] == [("ncclBcast", 1), ("ncclBcast", 1)]
    assert stats.waits[0].matched == 1
