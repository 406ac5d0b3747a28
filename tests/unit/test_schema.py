"""The row schema, written once (decode/schema.py): docs/formats.md's table is
made from it, and the rows of every format have its keys in its order."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.schema import JSONL_KEYS, RANK_KEYS, ROW_SCHEMA, time_ms, time_ms_text
from cudaprobe.output.formats import REPORTERS, schema_table

from ..conftest import REPO


def test_the_documented_table_is_the_schema():
    doc = (REPO / "docs" / "formats.md").read_text()
    start = doc.index("| key | type | meaning |")
    end = doc.index("\n\n", start)
    assert doc[start:end + 1] == schema_table(), \
        "docs/formats.md's key table differs from cudaprobe/decode/schema.py"


def test_every_format_has_the_schema_keys_in_order():
    call = Call(time_ms(1_500_000, 0), 1_500_000, 7, 8, "app", "cudaFree", "runtime", "memory",
                900, 0, "cudaSuccess", {"devPtr": "0x10"}, "devPtr=0x10")
    ranked = Call(time_ms(1_500_000, 0), 1_500_000, 9, 9, "app", "cudaFree", "runtime",
                  "memory", 900, 0, "cudaSuccess", {"devPtr": "0x10"}, "devPtr=0x10")
    ranked.rank, ranked.world_size = 1, 2
    for fmt in ("jsonl", "json", "csv"):
        buf = io.StringIO()
        r = REPORTERS[fmt](buf)
        r.start()
        r.calls([call, ranked])
        r.finish(Summary())
        text = buf.getvalue()
        if fmt == "csv":  # the columns of every row, rank and world_size among them
            assert tuple(next(csv.reader(io.StringIO(text)))) == JSONL_KEYS + RANK_KEYS
            continue
        if fmt == "json":
            rows = json.loads(text)["calls"]
        else:
            rows = [json.loads(line) for line in text.splitlines()[:2]]
        assert tuple(rows[0]) == JSONL_KEYS, fmt
        assert tuple(rows[1]) == JSONL_KEYS + RANK_KEYS, fmt  # a known rank's row
    assert call.time_ms == 1.5
    optional = [n for key in ROW_SCHEMA if key.option for n in key.names]
    assert optional == ["rank", "world_size", "py_stack", "py_stack_forward", "autograd_node",
                        "gpu"]
    assert not set(optional) & set(JSONL_KEYS)


@pytest.mark.parametrize("since_ns", [
    0, 1, 499, 500, 501, 999, 1000, 1499, 1500, 1501, 10_000, 123_456_789, 999_999_500,
    1_000_000_000, 3_600_000_000_500, 86_400_000_000_123, (1 << 60) - 1, -1, -500, -1_500,
    -123_456_789])
def test_time_ms_text_is_the_repr_of_time_ms(since_ns):
    t0 = 1_000_000_000_000
    assert time_ms_text(since_ns) == repr(time_ms(t0 + since_ns, t0))


def test_time_ms_text_agrees_with_round_over_many_times():
    rng = random.Random(7)
    for scale in (10**4, 10**7, 10**10, 10**13, 10**16):
        for _ in range(20_000):
            n = rng.randrange(scale)
            n -= n % 1000 - 500 if rng.random() < 0.1 else 0  # ties too
            assert time_ms_text(n) == repr(round(n / 1e6, 3)), n
