"""The trace hot path (decode/records.py, and the reporters' row makers) must
give what decode_event gives, and its JSONL lines and CSV rows must be what
the reporters write of the calls, byte for byte."""

from __future__ import annotations

import csv
import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudaprobe.analysis.summary import Summary
from cudaprobe.catalogue.functions import ArgKind
from cudaprobe.decode.calls import Call, decode_event
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.nesting import CallOrder
from cudaprobe.decode.records import NAMED_KINDS, LaunchNames, ProbeDecoder, RecordDecoder
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.csv import CsvReporter, csv_row
from cudaprobe.output.files import LazyOutputFile, OutputStream
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.recordtext import compile_args_text
from cudaprobe.probe.event import (
    CFG_WORDS,
    MAX_OUTS,
    MAX_SLOTS,
    MAX_WORDS,
    R_COMM,
    R_WORDS,
    RECORD_STRUCTS,
    from_record,
)

from .eventbuild import EVERY_PROBE

SPECIAL = [0, 1, 0x7FC00000, 0x80000000, 0xFFFFFFFF, 1 << 63, (1 << 64) - 1,
           0x0000000300000002, 4 << 20]
U64 = st.one_of(st.integers(min_value=0, max_value=(1 << 64) - 1), st.sampled_from(SPECIAL))
T0 = 1_000_000
json_line = JsonlReporter(io.StringIO()).json_line


def dumps(call: Call) -> str:
    return json.dumps(call.to_dict(), separators=(",", ":"), ensure_ascii=True)


def record(func_id: int, words: list[int], ret: int = 35, comm: bytes = b"tr\xc3\xa4in\"x",
           short: bool = True, read: bool | None = None) -> tuple:
    """A record as the ring buffer reader unpacks it: the probe's words only
    (short), or the whole event, as the kernel writes it for probes that copy
    at entry. Out-parameters `read` (by default: when ret is 0, as the kernel
    does), or not: nouts 0, and a short record ends before them."""
    if 0 <= func_id < len(EVERY_PROBE):
        fn = EVERY_PROBE[func_id].function
        nargs, nouts = fn.words, len(fn.out_index)
    else:
        nargs, nouts = MAX_SLOTS, MAX_OUTS
    if not (ret == 0 if read is None else read):
        nouts = 0
    n = nargs + nouts if short else MAX_WORDS + CFG_WORDS
    layout = RECORD_STRUCTS[n]
    values = (5_000_123, 41_200, 7, 8, func_id, nargs, nouts, ret, comm, 0, -1,
              *(words * n)[:n])
    return layout.unpack(layout.pack(*values))


def both_ways(rec: tuple) -> tuple[Call, Call]:
    fast = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls([rec])[0]
    slow = decode_event(from_record(rec), EVERY_PROBE, T0, handles=KernelHandles())
    return fast, slow


def test_every_probe_decodes_as_decode_event_does():
    for probe in EVERY_PROBE:
        for words in ([0], [1, 2, 3], SPECIAL, [4 << 20, 1]):
            for short in (True, False):
                for ret in (0, 35):
                    rec = record(probe.func_id, list(words), ret=ret, short=short)
                    fast, slow = both_ways(rec)
                    assert fast.to_dict() == slow.to_dict(), probe.symbol
                    assert json_line(fast) == dumps(slow), probe.symbol


@given(st.sampled_from(EVERY_PROBE), st.lists(U64, min_size=1, max_size=8),
       st.integers(-(1 << 31), (1 << 31) - 1), st.booleans(), st.booleans())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_words_decode_as_decode_event_does(probe, words, ret, short, read):
    fast, slow = both_ways(record(probe.func_id, words, ret=ret, short=short, read=read))
    assert fast.to_dict() == slow.to_dict()
    line = json_line(fast)
    assert line == dumps(slow)
    json.loads(line)


def test_out_parameters_not_read_are_null_and_dash_every_way():
    """nouts 0 (a failed call): the short record has no out words to index."""
    for probe in EVERY_PROBE:
        fn = probe.function
        if not fn.out_index:
            continue
        for short in (True, False):
            rec = record(probe.func_id, SPECIAL, ret=35, short=short)
            if short:
                assert len(rec) == R_WORDS + fn.words
            fast, slow = both_ways(rec)
            for call in (fast, slow):
                for name in fn.out_index:
                    assert call.args[name] is None, (probe.symbol, name)
                    assert f"{name}=-" in call.details.split(), (probe.symbol, name)
            assert fast.to_dict() == slow.to_dict(), probe.symbol
            assert json_line(fast) == dumps(slow), probe.symbol
            if ProbeDecoder(probe).simple:
                args, _details = compile_args_text(ProbeDecoder(probe))[1](rec)
                assert all(json.loads(args)[name] is None for name in fn.out_index)


def test_cudamalloc_is_decoded_lazily_from_its_record():
    malloc = next(p for p in EVERY_PROBE if p.symbol == "cudaMalloc")
    assert ProbeDecoder(malloc).simple
    call = RecordDecoder(EVERY_PROBE, T0).calls([record(malloc.func_id, [0x10, 64])])[0]
    assert call._args is None and call._details is None  # nothing decoded yet
    assert call.event == "cudaMalloc" and call.ret_name == "cudaErrorInsufficientDriver"
    assert call.time_ms == 4.0 and call.process == 'träin"x'
    assert call.details == "devPtr=- size=64 B"  # failed: devPtr not read
    assert call.args == {"devPtr": None, "size": 64}
    call = RecordDecoder(EVERY_PROBE, T0).calls([record(malloc.func_id, [0x10, 64], ret=0)])[0]
    assert call.ret_name == "cudaSuccess"
    assert call.details == "devPtr=0x10 size=64 B"  # the words: size, then devPtr
    assert call.args == {"devPtr": "0x10", "size": 64}
    assert json.loads(json_line(call))["args"] == {"devPtr": "0x10", "size": 64}


def test_assigned_args_and_details_are_what_jsonl_writes():
    malloc = next(p for p in EVERY_PROBE if p.symbol == "cudaMalloc")
    call = RecordDecoder(EVERY_PROBE, T0).calls([record(malloc.func_id, [0x10, 64])])[0]
    call.details = "changed"
    call.args = {"x": 1}
    assert json.loads(json_line(call))["details"] == "changed"
    assert json.loads(json_line(call))["args"] == {"x": 1}


def test_unknown_probe_ids_are_counted_not_raised():
    decoder = RecordDecoder(EVERY_PROBE, T0)
    assert decoder.calls([record(len(EVERY_PROBE), [1]), record(0xFFFF, [1])]) == []
    assert decoder.errors == 2


def test_processes_are_seen_once_before_their_first_call():
    seen = []
    decoder = RecordDecoder(EVERY_PROBE, T0, see_process=seen.append)
    decoder.calls([record(0, [1]), record(1, [1])])
    assert seen == [7]


def test_jsonl_reporter_writes_the_same_lines_as_before(tmp_path):
    recs = [record(p.func_id, SPECIAL) for p in EVERY_PROBE]
    calls = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls(recs)
    out = io.StringIO()
    JsonlReporter(out).calls(calls)
    slow = [decode_event(from_record(r), EVERY_PROBE, T0, handles=KernelHandles()) for r in recs]
    assert out.getvalue() == "".join(dumps(c) + "\n" for c in slow)


def test_jsonl_from_records_is_what_the_reporter_writes_of_calls():
    recs = [record(p.func_id, words, ret=ret) for p in EVERY_PROBE
            for words, ret in ((SPECIAL, 35), ([1, 2, 3], 0), ([0], 2), (SPECIAL, 0))]
    recs.append(record(len(EVERY_PROBE), [1]))  # unknown probe: counted, not written
    by_calls, by_records = Summary(), Summary()
    calls_decoder = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles())
    calls = calls_decoder.calls(recs)
    by_calls.add(calls)
    out = io.StringIO()
    JsonlReporter(out).calls(calls)
    records_decoder = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles())
    fast = io.StringIO()
    reporter = JsonlReporter(fast)
    for batch in (recs[:50], recs[50:]):
        records_decoder.count(batch, by_records)
        reporter.records(batch, records_decoder)
    assert fast.getvalue() == out.getvalue()
    assert by_records.to_dict() == by_calls.to_dict()
    assert records_decoder.errors == calls_decoder.errors == 1


@given(st.lists(st.tuples(st.sampled_from(EVERY_PROBE), st.lists(U64, min_size=1, max_size=8),
                          st.integers(-(1 << 31), (1 << 31) - 1), st.booleans(),
                          st.booleans()), max_size=20))
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_records_write_the_same_jsonl_both_ways(batch):
    recs = [record(p.func_id, words, ret=ret, short=short, read=read)
            for p, words, ret, short, read in batch]
    calls = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls(recs)
    summary = Summary()
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles())
    decoder.count(recs, summary)
    out = io.StringIO()
    JsonlReporter(out).records(recs, decoder)
    assert out.getvalue() == "".join(dumps(c) + "\n" for c in calls)
    assert summary.total_calls == len(calls)


def test_csv_from_records_is_what_the_reporter_writes_of_calls():
    recs = [record(p.func_id, words, ret=ret) for p in EVERY_PROBE
            for words, ret in ((SPECIAL, 35), ([1, 2, 3], 0), ([0], 2), (SPECIAL, 0))]
    by_calls, by_records = Summary(), Summary()
    calls = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls(recs)
    by_calls.add(calls)
    slow, fast = io.StringIO(), io.StringIO()
    reporter = CsvReporter(slow)
    reporter.start()
    reporter.calls(calls)
    reporter = CsvReporter(fast)
    reporter.start()
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles())
    for batch in (recs[:40], recs[40:]):
        decoder.count(batch, by_records)
        reporter.records(batch, decoder)
    assert fast.getvalue() == slow.getvalue()
    assert by_records.to_dict() == by_calls.to_dict()
    # what Python's csv module makes of the same rows (the fast path spells them itself)
    assert [tuple(map(str, r)) for r in csv.reader(io.StringIO(fast.getvalue()))][1:] == \
        [tuple("" if v is None else str(v) for v in csv_row(c)) for c in calls]


def test_jsonl_rows_to_a_file_are_a_line_each_whatever_a_name_holds(tmp_path):
    """Rows go to a file taken to be a line each, not counted: JSON escapes a
    line break a process's name holds, so the count given is the file's."""
    recs = [record(p.func_id, [1, 2, 3], ret=0, comm=comm) for p in EVERY_PROBE[:40]
            for comm in (b"tr\xc3\xa4in\"x", b"a\nb\xe2\x80\xa6")]
    calls = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls(recs)
    out = LazyOutputFile(str(tmp_path / "calls.jsonl"), force=True)
    JsonlReporter(out).records(recs, RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()))
    out.flush()
    text = (tmp_path / "calls.jsonl").read_bytes()
    assert text == "".join(dumps(c) + "\n" for c in calls).encode()
    assert out.lines == text.count(b"\n") == len(recs)


def test_csv_rows_written_packed_to_a_file_are_the_utf8_of_the_rows(tmp_path):
    """Rows go to a file as the UTF-8 bytes of what the reporter writes of the
    calls (made packed, a byte a character: the comm here is not ASCII, and a
    newline in a process's name stays in its quoted cell)."""
    recs = [record(p.func_id, words, ret=ret, comm=comm) for p in EVERY_PROBE[:40]
            for words, ret in (([1, 2, 3], 0), (SPECIAL, 35))
            for comm in (b"tr\xc3\xa4in\"x", b"a\nb\xe2\x80\xa6")]
    calls = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()).calls(recs)
    slow = io.StringIO()
    reporter = CsvReporter(slow)
    reporter.start()
    reporter.calls(calls)
    out = LazyOutputFile(str(tmp_path / "calls.csv"), force=True)
    reporter = CsvReporter(out)
    reporter.start()
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles())
    for batch in (recs[:50], recs[50:]):
        reporter.records(batch, decoder)
    out.flush()
    assert (tmp_path / "calls.csv").read_bytes() == slow.getvalue().encode()
    assert out.lines == slow.getvalue().count("\n")  # counted: a name holds a line break
    plain = [r for r in recs if r[R_COMM].startswith(b"tr")]  # a line a row, taken as such
    out = LazyOutputFile(str(tmp_path / "plain.csv"), force=True)
    reporter = CsvReporter(out)
    reporter.start()
    reporter.records(plain, RecordDecoder(EVERY_PROBE, T0, handles=KernelHandles()))
    out.flush()
    text = (tmp_path / "plain.csv").read_bytes()
    assert out.lines == text.count(b"\n") == 1 + len(plain)


def test_csv_rows_of_a_ranked_process_from_records_are_what_the_csv_module_writes():
    """A rank learnt midway: the rows before it have empty cells, those after it
    the rank, in both paths."""
    recs = [record(p.func_id, [1, 2, 3], ret=0) for p in EVERY_PROBE[:12]]
    outs = []
    for path in ("calls", "records"):
        handles = KernelHandles()
        decoder = RecordDecoder(EVERY_PROBE, T0, handles=handles)
        out = io.StringIO()
        reporter = CsvReporter(out)
        reporter.start()
        for i, batch in enumerate((recs[:6], recs[6:])):
            if i:
                decoder.ranks.communicator(7, 1, 2)
            if path == "calls":
                reporter.calls(decoder.calls(batch))
            else:
                reporter.records(batch, decoder)
        outs.append(out.getvalue())
    assert outs[0] == outs[1]
    rows = list(csv.reader(io.StringIO(outs[1])))[1:]
    assert [r[-2:] for r in rows] == [["", ""]] * 6 + [["1", "2"]] * 6


KERNEL = ("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, float, "
          "at::native::(anonymous namespace)::FillFunctor<float> >(int, "
          "at::native::(anonymous namespace)::FillFunctor<float>, float*)")


class NamingSymbolizer:
    """Names the host stubs at 0x1000 and at 2: what the trace's symbolizer
    would; counts the questions."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    def __call__(self, pid: int, address: int, frame=None) -> str | None:
        self.asked.append((pid, address))
        return {0x1000: KERNEL, 2: "vecAdd(float*, int)"}.get(address)


def launch_probes():
    """Launches by host stub whose other arguments are words (not a config struct)."""
    return [p for p in EVERY_PROBE if any(a.kind is ArgKind.FUNC for a in p.function.args)
            and all(a.kind in NAMED_KINDS for a in p.function.args)]


def test_a_launch_named_by_its_stub_decodes_as_decode_event_does_in_every_format():
    """Launches by host stub (cudaLaunchKernel and kin) take the compiled path
    with their kernel's name: the same Call, JSONL line and CSV row as
    decode_event's, named or not."""
    assert {"cudaLaunchKernel", "cudaLaunchCooperativeKernel"} <= {
        p.symbol for p in launch_probes()}
    recs = []
    for probe in launch_probes():
        assert ProbeDecoder(probe, LaunchNames(None, None)).simple, probe.symbol
        for words in ([0x1000, 0x40, 1, 0x80, 1, 0, 0x7f00], [2, 3, 4], [0x2000], SPECIAL):
            for ret in (0, 35):
                recs.append(record(probe.func_id, list(words), ret=ret))
    slow = [decode_event(from_record(rec), EVERY_PROBE, T0, NamingSymbolizer(),
                         handles=KernelHandles()) for rec in recs]
    fast = RecordDecoder(EVERY_PROBE, T0, NamingSymbolizer(), handles=KernelHandles()
                         ).calls(recs)
    assert [c.to_dict() for c in fast] == [c.to_dict() for c in slow]
    assert [json_line(c) for c in fast] == [dumps(c) for c in slow]
    jsonl = RecordDecoder(EVERY_PROBE, T0, NamingSymbolizer(), handles=KernelHandles()
                          ).decode(recs, JsonlReporter(io.StringIO()))
    assert jsonl == [dumps(c) + "\n" for c in slow]  # byte for byte
    named = [json.loads(line) for line in jsonl if '"func_name"' in line]
    assert len(named) >= 2 * len(launch_probes())  # each probe named at least twice
    assert all("vectorized_elementwise_kernel<…>" in c["details"] or "vecAdd" in c["details"]
               for c in named)
    by_calls, by_records = io.StringIO(), io.StringIO()
    reporter = CsvReporter(by_calls)
    reporter.start()
    reporter.calls(slow)
    reporter = CsvReporter(by_records)
    reporter.start()
    reporter.records(recs, RecordDecoder(EVERY_PROBE, T0, NamingSymbolizer(),
                                         handles=KernelHandles()))
    assert by_records.getvalue() == by_calls.getvalue()
    # Chrome: slices of calls not decoded yet (straight from their records) as those
    # of the same calls decoded first
    by_calls, by_records = io.StringIO(), io.StringIO()
    for out, decode_first in ((by_calls, True), (by_records, False)):
        calls = RecordDecoder(EVERY_PROBE, T0, NamingSymbolizer(), handles=KernelHandles()
                              ).calls(recs)
        if decode_first:
            assert all(c.args is not None for c in calls)
        reporter = ChromeReporter(out)
        reporter.start()
        reporter.calls(calls)
    assert by_records.getvalue() == by_calls.getvalue()
    assert '"call":"cudaLaunchKernel"' in by_records.getvalue()  # named launches among them


def test_a_kernel_name_found_is_remembered_and_a_name_not_found_is_asked_again():
    names = LaunchNames(symbolize := NamingSymbolizer(), None)
    launch = next(p for p in EVERY_PROBE if p.symbol == "cudaLaunchKernel")
    rec = record(launch.func_id, [0x1000])
    assert [names(rec, 0x1000) for _ in range(3)] == [KERNEL] * 3
    assert [names(rec, 0x2000) for _ in range(2)] == [None] * 2
    assert symbolize.asked == [(7, 0x1000), (7, 0x2000), (7, 0x2000)]


def test_driver_launches_from_records_are_named_by_the_handles_as_they_are_now():
    """cuLaunchKernel rows straight from their records: a handle a traced
    cuModuleGetFunction named, one never named, NULL; then the first handle
    named again (its module reloaded): each row as decode_event writes it at
    that point, byte for byte, and the new name from then on."""
    get = next(p for p in EVERY_PROBE if p.symbol == "cuModuleGetFunction").function
    launch = next(p for p in EVERY_PROBE if p.symbol == "cuLaunchKernel")
    words = [[h, 4, 1, 1, 256, 1, 1, 0, 0, 0, 0] for h in (0xF001, 0xF002, 0)]
    recs = [record(launch.func_id, w) for w in words]
    fast_handles, slow_handles = KernelHandles(), KernelHandles()
    decoder = RecordDecoder(EVERY_PROBE, T0, handles=fast_handles)
    lines, expected = [], []
    for name in ("_Z6vecAddPKfS0_Pfi", "_Z6vecSubPKfS0_Pfi"):
        for handles in (fast_handles, slow_handles):
            handles.learn(get, 7, {"hfunc": "0xf001", "name": name})
        for _ in range(2):  # the second time from what the row maker remembers
            lines += decoder.decode(recs, JsonlReporter(io.StringIO()))
            expected += [dumps(decode_event(from_record(r), EVERY_PROBE, T0,
                                            handles=slow_handles)) + "\n" for r in recs]
    assert lines == expected
    # Chrome: the slices straight from the records as those of the decoded calls,
    # a named handle's slice under its kernel's short name
    outs = []
    for decode_first in (True, False):
        handles = KernelHandles()
        handles.learn(get, 7, {"hfunc": "0xf001", "name": "_Z6vecAddPKfS0_Pfi"})
        calls = RecordDecoder(EVERY_PROBE, T0, handles=handles).calls(recs)
        if decode_first:
            assert all(c.args is not None for c in calls)
        out = io.StringIO()
        reporter = ChromeReporter(out)
        reporter.start()
        reporter.calls(calls)
        outs.append(out.getvalue())
    assert outs[1] == outs[0]
    assert '"name":"vecAdd(float const*, float const*, float*, int)"' in outs[1]
    rows = [json.loads(line) for line in lines]
    assert [r["args"].get("func_name") for r in rows[:3]] == [
        "vecAdd(float const*, float const*, float*, int)", None, None]
    assert "(name unknown" in rows[1]["details"] and "(name unknown" not in rows[2]["details"]
    assert rows[-3]["args"]["func_name"] == "vecSub(float const*, float const*, float*, int)"
    assert rows[0]["args"]["gridDim"] == [4, 1, 1] and rows[0]["args"]["blockDim"] == [256, 1, 1]


class Collected(OutputStream):
    """An output stream that keeps what it sends, and the lines it was told of."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.data = bytearray()
        self.counted = 0

    def _send(self, data: bytes, lines: int) -> None:
        self.data += data
        self.counted += lines


def timed(func_id: int, words: list[int], start_ns: int, dur_ns: int, tid: int, pid: int = 7,
          ret: int = 0) -> tuple:
    """record(), at a time and on a thread of its own."""
    r = list(record(func_id, words, ret=ret, short=False))
    r[0], r[1], r[2], r[3] = start_ns, dur_ns, pid, tid
    return tuple(r)


@given(st.lists(st.tuples(st.sampled_from(["cudaLaunchKernel", "cudaMalloc", "cuLaunchKernel",
                                           "cuLaunchKernelEx", "cuModuleGetFunction",
                                           "cuMemAlloc_v2", "cudaGetDeviceCount"]),
                          st.integers(1, 3), st.booleans(), st.integers(0, 1)),
                min_size=1, max_size=30),
       st.booleans())
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
def test_chrome_from_records_is_what_it_writes_of_the_calls(steps, ranked):
    """Chrome straight from the records (no Call made) writes what it writes of
    the decoded calls, byte for byte: track names (a rank learnt later names
    the process again), slices, kernels named by their handles, the
    runtime -> driver flows of calls made inside others, results."""
    by_symbol = {p.symbol: p for p in EVERY_PROBE}
    get = by_symbol["cuModuleGetFunction"].function
    recs, t = [], 1_000_000
    for symbol, tid, nested, pid_step in steps:
        probe = by_symbol[symbol]
        words = [0xF001, 4, 1, 1, 256, 1, 1, 0, 0, 0, 0] if "Launch" in symbol else [0x1000, 64]
        pid = 7 + pid_step
        if nested and probe.function.api == "runtime":  # a driver call made inside it
            inner = by_symbol["cuLaunchKernel"]
            recs.append(timed(inner.func_id, words, t + 100, 200, tid, pid))
        recs.append(timed(probe.func_id, words, t, 1_000, tid, pid, ret=0 if tid < 3 else 35))
        t += 5_000
    order = CallOrder([p.function.api == "runtime" for p in EVERY_PROBE], hold_ns=0)
    ordered, marks = order.add(recs)
    more, more_marks = order.flush()
    ordered, marks = ordered + more, marks + more_marks
    outs = []
    for from_records in (True, False):
        handles = KernelHandles()
        handles.learn(get, 7, {"hfunc": "0xf001", "name": "_Z6vecAddPKfS0_Pfi"})
        if ranked:
            handles.ranks.communicator(8, 1, 2)
        decoder = RecordDecoder(EVERY_PROBE, T0, handles=handles)
        out = Collected() if from_records else io.StringIO()
        reporter = ChromeReporter(out)
        reporter.start()
        half = len(ordered) // 2  # two batches: what the reporter keeps between them
        for a, b in ((0, half), (half, len(ordered))):
            if from_records:
                reporter.records(ordered[a:b], decoder, marks[a:b])
            else:
                reporter.calls(decoder.calls(ordered[a:b], marks[a:b]))
        if from_records:  # its line breaks given as its events were made, not counted
            out.flush()
            assert out.counted == out.data.count(b"\n")
        outs.append(out.data.decode() if from_records else out.getvalue())
    assert outs[0] == outs[1]
    assert json.loads(outs[0] + "\n]")
