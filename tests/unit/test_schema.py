"""The row schema, written once (decode/schema.py): docs/formats.md's table is
made from it, and the rows of every format have its keys in its order."""

from __future__ import annotations

import csv
import io
import json

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.schema import JSONL_KEYS, RANK_KEYS, ROW_SCHEMA, time_ms
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
