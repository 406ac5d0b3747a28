"""Reporters render to an injected stream; the format follows --format or -o."""

from __future__ import annotations

import csv
import io
import json

import pytest

from cudaprobe.analysis.summary import Summary
from cudaprobe.catalogue import functions as catalogue
from cudaprobe.decode.calls import decode_event
from cudaprobe.decode.schema import JSONL_KEYS
from cudaprobe.errors import UsageError
from cudaprobe.output.formats import REPORTERS, choose_format
from cudaprobe.output.table import TableReporter, make_console
from cudaprobe.probe.plan import Probe

from .eventbuild import make_event


def calls():
    probes = [Probe(0, "cudaMalloc", catalogue.BY_NAME["cudaMalloc"]),
              Probe(1, "cudaLaunchKernel_ptsz", catalogue.BY_NAME["cudaLaunchKernel"])]
    out = []
    for fid, args, outs, ret, comm in [
        (0, (0x10, 4096), (0x7F0000000000,), 0, "train"),
        (1, (0x401000, 1 | (1 << 32), 1, 32 | (1 << 32), 1, 0, 0, 0), (), 35, "tr[ai]n"),
    ]:
        raw = make_event(args, outs, ret=ret, ts_ns=5_000_000, duration_ns=41_200, pid=7,
                         tid=8, func_id=fid, comm=comm)
        out.append(decode_event(raw, probes, 0))
    return out


def summary_for(cs):
    s = Summary(libraries=["/lib/libcudart.so.13"])
    s.add(cs)
    s.lost = {"ringbuf_full": 0, "pairing_map_full": 0, "wakeups": 3}
    return s


def test_jsonl_lines_and_trailer():
    buf = io.StringIO()
    r = REPORTERS["jsonl"](buf)
    cs = calls()
    r.start()
    r.calls(cs)
    r.finish(summary_for(cs))
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert [tuple(x) for x in lines[:2]] == [JSONL_KEYS, JSONL_KEYS]
    assert lines[0]["args"] == {"devPtr": "0x7f0000000000", "size": 4096}
    assert lines[1]["event"] == "cudaLaunchKernel_ptsz" and lines[1]["ret"] == 35
    trailer = lines[2]["summary"]
    assert trailer["calls"] == 2 and trailer["lost_total"] == 0
    assert trailer["by_event"]["cudaLaunchKernel_ptsz"]["errors"] == {
        "cudaErrorInsufficientDriver": 1}


def test_csv_has_jsonl_columns():
    buf = io.StringIO()
    r = REPORTERS["csv"](buf)
    r.start()
    r.calls(calls())
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert tuple(rows[0]) == JSONL_KEYS + ("rank", "world_size")
    assert json.loads(rows[1][JSONL_KEYS.index("args")])["size"] == 4096


def test_table_rows_and_summary_escape_markup():
    buf = io.StringIO()
    r = TableReporter(buf, console=make_console(buf))
    cs = calls()
    r.start()
    r.calls(cs)
    r.finish(summary_for(cs))
    text = buf.getvalue()
    header = text.splitlines()[0].split()
    assert header == ["TIME(ms)", "PROCESS", "PID", "TID", "EVENT", "LATENCY", "RESULT", "DETAILS"]
    assert "tr[ai]n" in text  # rich markup in names is not interpreted
    assert "41.2µs" in text and "cudaErrorInsufficientDriver" in text
    assert "size=4.0 KiB → devPtr=0x7f0000000000" in text  # what went in, then what came out
    assert "2 calls in" in text and "0 lost" in text


def failed_malloc():
    """cudaMalloc that returned 2: the kernel did not read devPtr (nouts 0)."""
    probes = [Probe(0, "cudaMalloc", catalogue.BY_NAME["cudaMalloc"])]
    raw = make_event((0x7FFC0000, 64), (0x677F9A5F,) * 4, ret=2, ts_ns=5_000_000,
                     duration_ns=41_200, pid=7, tid=8, comm="train")
    return decode_event(raw, probes, 0)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "chrome", "table"])
def test_out_parameters_not_read_are_null_or_dash_in_every_format(fmt):
    buf = io.StringIO()
    r = TableReporter(buf, console=make_console(buf)) if fmt == "table" else REPORTERS[fmt](buf)
    c = failed_malloc()
    r.start()
    r.calls([c])
    r.finish(summary_for([c]))
    text = buf.getvalue()
    assert "677f9a5f" not in text.lower()
    if fmt == "jsonl":
        line = json.loads(text.splitlines()[0])
        assert line["args"] == {"devPtr": None, "size": 64}
        assert line["details"] == "devPtr=- size=64 B"
    elif fmt == "csv":
        row = list(csv.reader(io.StringIO(text)))[1]
        assert row[JSONL_KEYS.index("args")] == '{"devPtr":null,"size":64}'
        assert row[JSONL_KEYS.index("details")] == "devPtr=- size=64 B"
    elif fmt == "chrome":
        x = next(e for e in json.loads(text) if e["ph"] == "X")
        assert x["args"]["devPtr"] is None and x["args"]["details"] == "devPtr=- size=64 B"
    else:  # the table: an out-parameter not written is not shown
        assert "size=64 B" in text and "devPtr" not in text


def test_format_choice():
    assert choose_format(None, None) == "table"
    assert choose_format(None, "out.jsonl") == "jsonl"
    assert choose_format(None, "out.CSV") == "csv"
    assert choose_format("csv", "out.jsonl") == "csv"
    with pytest.raises(UsageError):
        choose_format("xml", None)
