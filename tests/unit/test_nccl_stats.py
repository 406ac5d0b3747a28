"""stats --by collective on decoded rows: sums per collective and rank, the
bandwidths nccl-tests defines, groups, and the straggler of a communicator."""

from __future__ import annotations

import io

import pytest

from cudaprobe.analysis.nccl import bus_factor, collective_stats, nccl_tests_size, stragglers
from cudaprobe.analysis.stats import StatsReport
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import ApiCall, GpuWork
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.table import make_console

MS = 1_000_000
CATEGORY = {"ncclAllReduce": "collective", "ncclBcast": "collective", "ncclAllGather": "collective",
            "ncclReduceScatter": "collective", "ncclBroadcast": "collective",
            "ncclSend": "p2p", "ncclRecv": "p2p", "ncclGroupStart": "group",
            "ncclGroupEnd": "group"}


def nccl(event: str, ts: int, pid: int = 10, rank: int | None = 0, nranks: int | None = 2,
         nbytes: int = 1 << 20, comm: str = "0xc0", ret: int = 0, gpu_ns: int = 0,
         duration: int = 5_000) -> Call:
    args = {} if CATEGORY[event] == "group" else {"comm": comm, "bytes": nbytes,
                                                   "rank": rank, "nranks": nranks}
    c = Call(ts / 1e6, ts, pid, pid, "python", event, "nccl", CATEGORY[event], duration, ret,
             "ncclSuccess" if ret == 0 else "ncclInvalidArgument", args, "")
    if gpu_ns:
        c.gpu = [GpuWork(pid, "kernel", ts + 10_000, ts + 10_000 + gpu_ns, 0, 1, 7, 1,
                         "ncclDevKernel", 0, ApiCall(pid, ts, ts + 1000, "cuLaunchKernelEx"))]
    return c


@pytest.mark.parametrize(("event", "n", "size_factor", "bus"), [
    ("ncclAllReduce", 4, 1, 1.5), ("ncclAllGather", 4, 4, 0.75),
    ("ncclReduceScatter", 8, 8, 0.875), ("ncclBroadcast", 4, 1, 1.0), ("ncclSend", 2, 1, 1.0),
])
def test_nccl_tests_definitions(event, n, size_factor, bus):
    assert nccl_tests_size(event, 1000, n) == 1000 * size_factor
    assert bus_factor(event, n) == bus


def test_rows_per_collective_and_rank_with_bandwidths():
    calls = []
    for i in range(4):  # two ranks, 4 all-reduces of 1 MiB each, 100 µs on the GPU
        calls.append(nccl("ncclAllReduce", i * MS, pid=10, rank=0, gpu_ns=100_000))
        calls.append(nccl("ncclAllReduce", i * MS + 1000, pid=11, rank=1, gpu_ns=100_000))
    calls.append(nccl("ncclAllGather", 9 * MS, pid=10, rank=0, nbytes=1000, gpu_ns=10_000))
    calls.append(nccl("ncclAllReduce", 10 * MS, pid=10, rank=0, ret=4))  # failed: no bytes
    stats = collective_stats(calls)
    rows = {(r.event, r.rank): r for r in stats.rows}
    ar = rows[("ncclAllReduce", 0)]
    assert (ar.calls, ar.failed, ar.bytes, ar.gpu_calls, ar.gpu_ns) == (5, 1, 4 << 20, 4,
                                                                       400_000)
    assert ar.algbw == pytest.approx((1 << 20) / 100_000)  # bytes per ns: GB/s
    assert ar.busbw == pytest.approx(ar.algbw * 2 * (2 - 1) / 2)
    ag = rows[("ncclAllGather", 0)]
    assert ag.bytes == 2000 and ag.busbw == pytest.approx(2000 / 10_000 * 0.5)
    assert rows[("ncclAllReduce", 1)].calls == 4
    document = stats.to_dict()
    first = document["collectives"][0]  # sorted by collective, then rank
    assert (first["event"], first["algbw_gbps"]) == ("ncclAllGather", round(ag.algbw, 3))


def test_a_group_of_one_gets_its_end_calls_gpu_time():
    calls = [nccl("ncclGroupStart", 0), nccl("ncclSend", 1000, nbytes=4096),
             nccl("ncclGroupEnd", 2000, gpu_ns=50_000),
             nccl("ncclGroupStart", 10 * MS), nccl("ncclSend", 10 * MS + 1000),
             nccl("ncclRecv", 10 * MS + 2000), nccl("ncclGroupEnd", 10 * MS + 3000,
                                                     gpu_ns=70_000)]
    rows = {r.event: r for r in collective_stats(calls).rows}
    assert (rows["ncclSend"].calls, rows["ncclSend"].gpu_calls, rows["ncclSend"].gpu_ns) == (
        2, 1, 50_000)
    assert rows["ncclRecv"].gpu_calls == 0
    # the group of two keeps its GPU time on its end
    assert (rows["ncclGroupEnd"].calls, rows["ncclGroupEnd"].gpu_ns) == (1, 70_000)


def test_the_rank_the_others_wait_for_is_named():
    calls = []
    for n in range(10):
        late = 20 * MS if n >= 5 else 0  # rank 1 sleeps before the last five
        calls.append(nccl("ncclAllReduce", n * 100 * MS, pid=10, rank=0))
        calls.append(nccl("ncclAllReduce", n * 100 * MS + 50_000 + late, pid=11, rank=1))
    # a second communicator (of 2 ranks too), used later: matched on its own
    calls.append(nccl("ncclSend", 2000 * MS, pid=10, rank=0, comm="0xd0"))
    calls.append(nccl("ncclRecv", 2000 * MS - 30 * MS, pid=11, rank=1, comm="0xd8"))
    waits = stragglers(calls)
    assert [(w.nranks, w.ordinal, w.matched) for w in waits] == [(2, 0, 10), (2, 1, 1)]
    main = waits[0]
    by_rank = {r.rank: r for r in main.ranks}
    assert by_rank[1].last == 10 and by_rank[0].last == 0
    assert by_rank[1].caused_ns == 10 * 50_000 + 5 * 20 * MS
    assert by_rank[1].max_ns == 20 * MS + 50_000
    assert main.straggler.rank == 1
    assert waits[1].straggler.rank == 0  # rank 0 came to its send 30 ms after the recv
    out = io.StringIO()
    render_stats(StatsReport([], nccl=collective_stats(calls)), make_console(out))
    text = out.getvalue()
    assert "slowest rank: 1 (the others waited 100.50ms for it in all; it came last to 10 of " \
           "10)" in text
    assert "ncclAllReduce" in text and "BUSBW GB/s" in text


def test_one_process_has_no_stragglers():
    assert stragglers([nccl("ncclAllReduce", i * MS) for i in range(3)]) == []


def test_a_call_made_inside_another_is_counted_once():
    # ncclBcast calls ncclBroadcast: two probes fire, one operation
    outer = nccl("ncclBcast", 0, duration=30_000, gpu_ns=100_000)
    inner = nccl("ncclBroadcast", 5_000, duration=20_000)
    calls = [outer, inner, nccl("ncclBcast", MS, pid=11, rank=1, duration=30_000),
             nccl("ncclBroadcast", MS + 5_000, pid=11, rank=1, duration=20_000)]
    stats = collective_stats(calls)
    assert [(r.event, r.calls) for r in stats.rows] == [("ncclBcast", 1), ("ncclBcast", 1)]
    assert stats.waits[0].matched == 1


def test_bandwidth_is_the_median_calls():
    # a call whose kernel waited 100 ms for a late rank is no slow transfer
    calls = [nccl("ncclAllReduce", i * MS, gpu_ns=100_000) for i in range(4)]
    calls.append(nccl("ncclAllReduce", 9 * MS, gpu_ns=100_000_000))
    (row,) = collective_stats(calls).rows
    assert row.algbw == pytest.approx((1 << 20) / 100_000)
    assert row.gpu_ns == 4 * 100_000 + 100_000_000  # the total keeps it
