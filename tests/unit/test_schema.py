"""The row schema, written once (decode/schema.py): docs/formats.md's table is
made from it, and the rows of every format have its keys in its order."""

from __future__ import annotations

import csv
import io
import json

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.schema import JSONL_KEYS, ROW_SCHEMA, time_ms
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
    for fmt in ("jsonl", "json", "csv"):
        buf = io.StringIO()
        r = REPORTERS[fmt](buf)
        r.start()
        r.calls([call])
        r.finish(Summary())
        text = buf.getvalue()
        if fmt == "csv":
            keys = tuple(next(csv.reader(io.StringIO(text))))
        elif fmt == "json":
            keys = tuple(json.loads(text)["calls"][0])
        else:
            keys = tuple(json.loads(text.splitlines()[0]))
        assert keys == JSONL_KEYS, fmt
    assert call.time_ms == 1.5
    optional = [n for key in ROW_SCHEMA if key.option for n in key.names]
    assert optional == ["py_stack", "gpu"] and not set(optional) & set(JSONL_KEYS)
