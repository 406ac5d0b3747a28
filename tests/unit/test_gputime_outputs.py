"""--gpu-time in every output: the JSONL `gpu` object, the table's GPU TIME
column, the Chrome device/stream tracks with a flow from each launch, the
stats per kernel and per copy kind; calls joined to GPU work as the library
writes it (decode.gputime.join, tested in test_gputime.py)."""

from __future__ import annotations

import io
import json
import os

from cudaprobe.analysis.gpustats import gpu_stats
from cudaprobe.analysis.stats import StatsReport
from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.gputime import ApiCall, GpuWork, join
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output import forked
from cudaprobe.output.chrome import GPU_PID_BASE, LAUNCH_FLOW_CATEGORY
from cudaprobe.output.formats import REPORTERS
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.stats_view import render_stats
from cudaprobe.output.table import TableReporter, make_console

from .. import chrome_check
from .eventbuild import EVERY_PROBE
from .test_chrome import T0, call
from .test_decoders import T0 as RT0
from .test_decoders import Collected, timed

VECADD = "_Z6vecAddPKfS0_Pfi"


def launched(n_kernels: int = 1) -> tuple[list, list[GpuWork]]:
    """A cudaMalloc, then a launch 100 µs after attach whose kernel(s) ran on
    device 0 stream 7 from 150 µs, 20 µs each."""
    calls = [call("cudaMalloc", 10, 20, args=(0x1000, 64)),
             call("cudaLaunchKernel", 100, 110, args=(0x4000, 1, 1, 1, 1, 0, 0))]
    work = [GpuWork(7, "kernel", T0 + 150_000 + 30_000 * i, T0 + 170_000 + 30_000 * i, 0, 1, 7,
                    5 + i, VECADD, api=ApiCall(8, T0 + 101_000, T0 + 109_000,
                                               "cudaLaunchKernel"))
            for i in range(n_kernels)]
    assert join(calls, work) == 0
    return calls, work


def test_jsonl_gpu_object_on_the_launch_only():
    calls, _ = launched()
    buf = io.StringIO()
    r = REPORTERS["jsonl"](buf, gpu_time=True)
    r.start()
    r.calls(calls)
    r.finish(Summary())
    malloc, launch, trailer = (json.loads(line) for line in buf.getvalue().splitlines())
    assert "gpu" not in malloc and "summary" in trailer
    assert launch["event"] == "cudaLaunchKernel"
    assert launch["gpu"] == {"kind": "kernel", "start_ns": T0 + 150_000, "duration_ns": 20_000,
                             "device": 0, "stream": 7, "context": 1}
    assert list(launch)[-1] == "gpu"  # the schema's keys first, as without --gpu-time


def test_table_gpu_time_column():
    calls, _ = launched()
    buf = io.StringIO()
    r = TableReporter(buf, console=make_console(buf), gpu_time=True)
    r.start()
    r.calls(calls)
    header, malloc, launch = buf.getvalue().splitlines()
    at = header.index("GPU TIME")
    assert header.index("RESULT") < at < header.index("DETAILS")
    end = at + len("GPU TIME")  # right-justified under its header
    assert malloc[:end].endswith(" -") and launch[:end].endswith(" 20.0µs")


def test_table_without_gpu_time_has_no_column():
    calls, _ = launched()
    buf = io.StringIO()
    r = TableReporter(buf, console=make_console(buf))
    r.start()
    r.calls(calls)
    assert "GPU TIME" not in buf.getvalue() and "20.0µs" not in buf.getvalue()


def test_chrome_gpu_tracks_and_launch_flows():
    calls, _ = launched(n_kernels=2)
    buf = io.StringIO()
    r = REPORTERS["chrome"](buf)
    r.start()
    r.calls(calls)
    summary = Summary()
    summary.add(calls)
    r.finish(summary)
    events = json.loads(buf.getvalue())
    report = chrome_check.check_events(events)
    assert report.problems == []
    gpu = (GPU_PID_BASE, 7)
    assert report.process_names[GPU_PID_BASE] == "GPU 0"
    assert report.thread_names[gpu] == "stream 7"
    assert report.tracks[gpu].slices == 2 and report.tracks[gpu].flows_in == 2
    kernels = [e for e in events if e.get("pid") == GPU_PID_BASE and e["ph"] == "X"]
    assert [(k["ts"], k["dur"]) for k in kernels] == [(150.0, 20.0), (180.0, 20.0)]
    assert kernels[0]["name"] == "vecAdd(float const*, float const*, float*, int)"
    assert kernels[0]["args"]["call"] == "cudaLaunchKernel"
    launch_flows = [(cat_name, src, dst) for cat_name, src, dst in report.flows
                    if src.track == (7, 8)]
    assert len(launch_flows) == 2
    assert all(src.name == "cudaLaunchKernel" for _, src, _ in launch_flows)
    assert [dst.start_ns for _, _, dst in launch_flows] == [150_000, 180_000]
    assert {e["cat"] for e in events if e["ph"] == "s" and e.get("id")} == {LAUNCH_FLOW_CATEGORY}
    # the summary line counts the calls' slices, not the GPU's
    assert any("the slices match" in line for line in report.lines())


def test_stats_per_kernel_and_per_copy_kind():
    work = [GpuWork(1, "kernel", 0, d, 0, 1, 7, i, VECADD) for i, d in
            enumerate(range(1000, 101_000, 1000))]  # 1..100 µs
    work.append(GpuWork(1, "kernel", 0, 5, 0, 1, 7, 200, "other"))
    work += [GpuWork(1, "memcpy", 0, 1000, 0, 1, 7, 300, "HtoD", bytes=4_000),
             GpuWork(1, "memcpy", 0, 3000, 0, 1, 7, 301, "HtoD", bytes=8_000),
             GpuWork(1, "memset", 0, 100, 0, 1, 7, 302, "", bytes=1_000)]
    stats = gpu_stats(work, dropped=3)
    vecadd, other = (r.to_dict(True) for r in stats.kernels)
    assert vecadd == {"name": "vecAdd(float const*, float const*, float*, int)", "calls": 100,
                      "total_ns": 5_050_000, "avg_ns": 50_500, "min_ns": 1000,
                      "max_ns": 100_000, "p50_ns": 50_000, "p99_ns": 99_000}
    assert other["calls"] == 1 and other["p99_ns"] == 5
    htod, memset = (r.to_dict(False) for r in stats.copies)
    assert (htod["name"], htod["calls"], htod["total_ns"], htod["bytes"],
            htod["bandwidth_gbps"]) == ("memcpy HtoD", 2, 4000, 12_000, 3.0)
    assert (memset["name"], memset["bytes"], memset["bandwidth_gbps"]) == ("memset", 1000, 10.0)
    report = StatsReport([], gpu=stats)
    assert report.to_dict()["gpu"]["dropped"] == 3
    assert report.to_dict()["gpu"]["kernel_total_ns"] == 5_050_005
    buf = io.StringIO()
    render_stats(report, make_console(buf))
    text = buf.getvalue()
    assert "GPU time per kernel" in text and "GPU time per copy kind" in text
    assert "3.00 GB/s" in text and "CUPTI dropped 3" in text
    assert "gpu" not in StatsReport([]).to_dict()



def held_sample(n: int) -> tuple[list, RecordDecoder]:
    """`n` calls held for --gpu-time, and their decoder: launches with one
    kernel, with two (a graph), a copy, calls with no GPU work, a call decoded
    already, and a process whose rank became known after some of its calls."""
    by = {p.symbol: p for p in EVERY_PROBE}
    launch, malloc = by["cudaLaunchKernel"].func_id, by["cudaMalloc"].func_id
    decoder = RecordDecoder(EVERY_PROBE, RT0, handles=KernelHandles())
    recs = [timed(launch, [0xF001, 4, 1, 1, 256, 1, 1, 0, 0, 0, 0], RT0 + 5_000 * i, 1_000,
                  1 + i % 2, 7 + i % 2) if i % 3 else
            timed(malloc, [0x1000 + i, 64 * i], RT0 + 5_000 * i, 1_000, 1, 7 + i % 2)
            for i in range(n)]
    calls = decoder.calls(recs[:30])
    decoder.ranks._set(8, 1, 2)  # pid 8's rank, known from here on
    calls += decoder.calls(recs[30:])
    assert calls[4].args  # decoded already: written the long way
    for i, c in enumerate(calls):
        if c.event != "cudaLaunchKernel":
            continue
        kernels = 2 if i % 5 == 0 else 1
        c.gpu = [GpuWork(c.pid, "kernel", c.ts_ns + 50_000 + 3_000 * k,
                         c.ts_ns + 52_000 + 3_000 * k, 0, 1, 7, i * 10 + k, VECADD)
                 for k in range(kernels)]
    calls[3].gpu = [GpuWork(calls[3].pid, "memcpy", calls[3].ts_ns + 9_000,
                            calls[3].ts_ns + 9_500, 0, 1, 7, 999, "HtoD", 64)]
    return calls, decoder


def test_held_calls_are_written_as_calls_writes_them():
    """--gpu-time's rows, held to the end and written from their records
    (JsonlReporter.held_calls), byte for byte as calls() writes the same Calls
    (a call decoded already, a rank learnt after some calls: those keep no
    rank, as calls() writes them)."""
    calls, decoder = held_sample(60)
    written = []
    for held in (False, True):
        out = Collected()
        r = REPORTERS["jsonl"](out, gpu_time=True)
        r.start()
        r.held_calls(calls, decoder) if held else r.calls(calls)
        out.flush()
        written.append((bytes(out.data), out.counted))
    assert written[0] == written[1]
    lines = [json.loads(line) for line in written[1][0].splitlines()]
    assert len(lines) == 60 and sum("gpu" in x for x in lines) == 41
    assert {x.get("rank") for x in lines if x["pid"] == 8} == {None, 1}
    assert {x["gpu"].get("count") for x in lines if "gpu" in x} == {None, 2}


class CollectedFile(Collected):
    """Collected, written from a thread as a file is (rows may come from children)."""
    threaded = True

    def _job(self, data: bytes) -> tuple[int, OSError | None]:
        self.data += data
        return len(data), None


def held_written(calls: list, decoder: RecordDecoder, workers: int) -> tuple[bytes, int]:
    """What JSONL writes of the held calls, and its lines: made here (workers
    0), or by forked children (output.forked.held_rows_forked)."""
    out = CollectedFile()
    r = REPORTERS["jsonl"](out, gpu_time=True)
    r.start()
    if not workers:
        r.held_calls(calls, decoder)
    else:
        assert forked.held_rows_forked(r, calls, decoder, workers)
    out.flush()
    return bytes(out.data), out.lines


def test_held_rows_made_by_children_are_the_thread_s_byte_for_byte(monkeypatch):
    """--gpu-time's held rows of a long trace made by forked children (a chunk
    each, 3 at once), in call order: byte for byte, and line for line, those
    the thread makes."""
    monkeypatch.setattr(forked, "HELD_CALLS", 50)
    calls, decoder = held_sample(600)
    here = held_written(calls, decoder, 0)

    def not_here(*_args):
        raise AssertionError("every chunk is the children's")

    monkeypatch.setattr(JsonlReporter, "held_calls", not_here)
    assert held_written(calls, decoder, 3) == here
    assert here[1] == 600 and here[0].count(b'"gpu":') > 300


def test_a_held_rows_child_that_fails_has_its_rows_made_here(monkeypatch):
    """Children that cannot make their rows (some chunks raise in them) exit
    non-zero: their chunks' rows are made here, in their place."""
    monkeypatch.setattr(forked, "HELD_CALLS", 50)
    calls, decoder = held_sample(600)
    here = held_written(calls, decoder, 0)
    parent, works = os.getpid(), JsonlReporter.held_lines
    failing = {id(calls[100]), id(calls[350]), id(calls[550])}

    def flaky(self, chunk, dec):
        if os.getpid() != parent and id(chunk[0]) in failing:
            raise RuntimeError("a child fails")
        return works(self, chunk, dec)

    monkeypatch.setattr(JsonlReporter, "held_lines", flaky)
    assert held_written(calls, decoder, 3) == here

