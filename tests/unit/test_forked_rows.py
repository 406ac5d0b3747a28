"""Rows made by forked children (output/forked.py): byte for byte the rows the
session's thread makes of the same records, in the same order, whatever
the batches; a child that fails has its rows made by the thread. Real
fork(2)s, no root: the records are made here as the ring's reader gives them."""

from __future__ import annotations

import os
import random

import pytest

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.nesting import CallOrder
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output import chrome, forked
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.csv import CsvReporter
from cudaprobe.output.forked import ForkedRows
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.probe.event import R_FUNC_ID, R_WORDS, RECORD_STRUCTS
from cudaprobe.probe.ringbuf import Strided, strided_layout

from .eventbuild import EVERY_PROBE
from .test_decoders import T0, Collected, record, timed

BY_SYMBOL = {p.symbol: p for p in EVERY_PROBE}
GET = BY_SYMBOL["cuModuleGetFunction"].function
LAUNCH_WORDS = [0xF001, 4, 1, 1, 256, 1, 1, 0, 0, 0, 0]


def trace(seed: int, n: int) -> tuple[list[tuple], list]:
    """`n` calls of a few processes and threads, in call order with their
    nesting: launches (runtime and driver, some made inside others), copies
    and allocations (rows from words alone), module loads (decoded whole: they
    name handles), and a launch whose record holds its kernel's name as the
    probe read it (it names its handle for the launches after it)."""
    rng = random.Random(seed)
    symbols = ["cudaLaunchKernel", "cuLaunchKernel", "cudaMalloc", "cuMemAlloc_v2",
               "cudaGetDeviceCount", "cuLaunchKernelEx"]
    recs, t = [], 1_000_000
    for i in range(n):
        symbol = "cuModuleGetFunction" if i % 997 == 500 else rng.choice(symbols)
        probe = BY_SYMBOL[symbol]
        handle = rng.choice([0xF001, 0xF002, 0xF003, 0])
        words = [handle, *LAUNCH_WORDS[1:]] if "Launch" in symbol else [0x1000 + i, 64]
        tid, pid = rng.randint(1, 3), 7 + rng.randint(0, 1)
        if rng.random() < 0.1 and probe.function.api == "runtime":  # a driver call inside
            recs.append(timed(BY_SYMBOL["cuLaunchKernel"].func_id, LAUNCH_WORDS, t + 100, 200,
                              tid, pid))
        rec = timed(probe.func_id, words, t, 1_000, tid, pid, ret=rng.choice([0, 35]))
        if i == n // 3:  # the kernel's name read at the launch's exit: handle 0xF003's
            whole = list(record(BY_SYMBOL["cuLaunchKernel"].func_id, [0xF003, *LAUNCH_WORDS[1:]],
                                short=False))
            whole[0], whole[1], whole[2], whole[3] = t, 1_000, pid, tid
            rec = (*whole, b"_Z6vecMulPKfS0_Pfi")
        recs.append(rec)
        t += 5_000
    order = CallOrder([p.function.api == "runtime" for p in EVERY_PROBE], hold_ns=0)
    ordered, marks = order.add(recs)
    more, more_marks = order.flush()
    return ordered + more, marks + more_marks


def written(reporter_type, batches, workers: int, monkeypatch=None) -> tuple[bytes, int, object]:
    """What the reporter writes of the batches: made here (workers 0), or by
    ForkedRows' children, polled between batches as the session does."""
    handles = KernelHandles()
    handles.learn(GET, 7, {"hfunc": "0xf001", "name": "_Z6vecAddPKfS0_Pfi"})
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=handles)
    decoder.ranks.known[8] = (1, 2)  # a rank in its rows, its process's track named by it
    out = Collected()
    reporter = reporter_type(out)
    reporter.start()
    rows = ForkedRows(reporter, decoder, out, workers) if workers else None
    for i, (recs, marks) in enumerate(batches):
        if rows is None or not rows.take(recs, marks):
            reporter.records(recs, decoder, marks)
        if rows is not None and i % 3 == 2:
            rows.poll()
    if rows is not None:
        rows.drain()
    reporter.finish(Summary())  # (Chrome's summary event: at the trace's last time)
    out.flush()
    return bytes(out.data), out.counted, rows


FORMATS = pytest.mark.parametrize("reporter_type", [JsonlReporter, CsvReporter, ChromeReporter],
                                  ids=["jsonl", "csv", "chrome"])


@FORMATS
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_made_by_children_are_the_thread_s_byte_for_byte(monkeypatch, reporter_type, seed):
    monkeypatch.setattr(forked, "FORK_RECORDS", 400)
    monkeypatch.setattr(forked, "MIN_FORK", 150)
    recs, marks = trace(seed, 6_000)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(recs)), 40))
    batches = [(recs[a:b], marks[a:b]) for a, b in zip([0, *cuts], [*cuts, len(recs)])]
    here, here_lines, _ = written(reporter_type, batches, 0)
    there, there_lines, rows = written(reporter_type, batches, 3)
    assert rows.forked >= 8 and rows.failed == 0  # children made most of them
    assert there == here and there_lines == here_lines
    assert b"vecMul" in there and b"vecAdd" in there  # named by a record, by a module load
    assert b"rank 1" in there or reporter_type is not ChromeReporter
    assert b'"ph":"f"' in there or reporter_type is not ChromeReporter  # runtime -> driver


@FORMATS
def test_a_child_that_fails_has_its_rows_made_by_the_thread(monkeypatch, reporter_type):
    """A child that cannot make its rows (here: some of them raise) exits
    non-zero: the thread makes them itself, in their place, from the reporter
    as that child had it (Chrome's tracks, flows and line breaks, past which
    the later children were made); nothing lost or reordered."""
    monkeypatch.setattr(forked, "FORK_RECORDS", 300)
    monkeypatch.setattr(forked, "MIN_FORK", 150)
    recs, marks = trace(4, 6_000)
    batches = [(recs[a:a + 200], marks[a:a + 200]) for a in range(0, len(recs), 200)]
    here, here_lines, _ = written(reporter_type, batches, 0)
    works = reporter_type.rows_data

    def broken(self, records, *args):
        if records[0][0] // 5_000 % 7 < 3:  # (by the first call's time: some children)
            raise RuntimeError("a child's failure")
        return works(self, records, *args)
    monkeypatch.setattr(reporter_type, "rows_data", broken)
    there, there_lines, rows = written(reporter_type, batches, 2)
    assert rows.failed >= 3 and rows.forked >= 3
    assert there == here and there_lines == here_lines


def test_a_child_holds_none_of_the_session_s_descriptors(monkeypatch):
    """The probes' links, the ring reader's stop pipe: a child holding a copy
    would keep the probes in after a detach, or the reader from its end, for
    as long as it lives. Each child looks for a descriptor the session holds
    and writes what it found as its rows."""
    monkeypatch.setattr(forked, "FORK_RECORDS", 500)
    read_end, write_end = os.pipe()

    def looks(self, records, decoder, nesting):
        try:
            os.fstat(write_end)
            return b"held\n", 1, 0
        except OSError:
            return b"closed\n", 1, 0
    monkeypatch.setattr(JsonlReporter, "rows_data", looks)
    try:
        recs, marks = trace(5, 3_000)
        batches = [(recs[a:a + 300], marks[a:a + 300]) for a in range(0, len(recs), 300)]
        there, _, rows = written(JsonlReporter, batches, 2)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert rows.forked >= 1 and b"closed" in there and b"held" not in there


def as_strided(recs: list[tuple]) -> Strided:
    """Records of one length as the spool holds them (RingBuffer.keep_strided)."""
    layout = strided_layout(RECORD_STRUCTS[len(recs[0]) - R_WORDS])
    return Strided(memoryview(b"".join(layout.pack(*r) for r in recs)), layout, len(recs))


@FORMATS
def test_batches_left_as_bytes_make_the_thread_s_rows_byte_for_byte(monkeypatch, reporter_type):
    """A launch loop's batches (one length, each call at the top) given to
    the children still bytes: the thread reads their pids and kernels from
    columns, the children unpack them. The rows are the thread's, byte for
    byte, mixed with batches given as tuples (a module load, kernels named
    by it and by a record of its own); Chrome's rows, which depend on those
    before them, from the state its thread keeps read from the columns."""
    check_batches_as_bytes(monkeypatch, reporter_type)


def test_chrome_batches_as_bytes_with_more_threads_than_kept_are_byte_for_byte(monkeypatch):
    """Chrome keeps each thread's latest top-level call for MAX_THREADS threads,
    the oldest pushed out: a batch whose threads would push one out is read
    call by call, in order, and the rows are still the thread's."""
    monkeypatch.setattr(chrome, "MAX_THREADS", 1)
    check_batches_as_bytes(monkeypatch, ChromeReporter)


def check_batches_as_bytes(monkeypatch, reporter_type):
    monkeypatch.setattr(forked, "FORK_RECORDS", 400)
    monkeypatch.setattr(forked, "MIN_FORK", 150)
    rng = random.Random(5)
    launch = BY_SYMBOL["cudaLaunchKernel"].func_id
    batches, t = [], 1_000_000
    for b in range(30):
        recs = []
        for _ in range(rng.randint(50, 300)):
            words = [rng.choice([0xF001, 0xF002, 0x5000 + b]), *LAUNCH_WORDS[1:]]
            recs.append(timed(launch, words, t, 1_000, rng.randint(1, 3), 7 + rng.randint(0, 1),
                              ret=rng.choice([0, 35])))
            t += 5_000
        batches.append((recs, [(0, None)] * len(recs)))
        if b % 7 == 3:  # a module load, decoded whole (its batch made in the thread)
            batches.append(trace(b, 40))
    here, here_lines, _ = written(reporter_type, batches, 0)
    handles = KernelHandles()
    handles.learn(GET, 7, {"hfunc": "0xf001", "name": "_Z6vecAddPKfS0_Pfi"})
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=handles)
    decoder.ranks.known[8] = (1, 2)
    out = Collected()
    reporter = reporter_type(out)
    reporter.start()
    rows = ForkedRows(reporter, decoder, out, 3)
    as_bytes = 0
    for i, (recs, marks) in enumerate(batches):
        one_length = len({len(r) for r in recs}) == 1 and all(m == (0, None) for m in marks)
        if one_length:
            batch = as_strided(recs)
            fids = batch.column(R_FUNC_ID)
            assert fids == [r[R_FUNC_ID] for r in recs]
            if rows.take_strided(batch, fids):
                as_bytes += 1
                continue
        if not rows.take(recs, marks):
            reporter.records(recs, decoder, marks)
        if i % 3 == 2:
            rows.poll()
    rows.drain()
    reporter.finish(Summary())
    out.flush()
    assert as_bytes >= 25 and rows.forked >= 8 and rows.failed == 0
    assert bytes(out.data) == here and out.counted == here_lines
    assert b"vecAdd" in here
