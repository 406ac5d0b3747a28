"""JSON Lines: one object per call, then one `{"summary": ...}` trailer line."""

from __future__ import annotations

import json

from ..decode import Call
from ..summary import Summary
from .base import Reporter

# one encoder for all lines: json.dumps(..., separators=...) builds a new one per call
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                           check_circular=False).encode


class JsonlReporter(Reporter):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def calls(self, calls: list[Call]) -> None:
        self.stream.write("".join([_encode(c.to_dict()) + "\n" for c in calls]))

    def finish(self, summary: Summary) -> None:
        self.stream.write(json.dumps({"summary": summary.to_dict()}, separators=(",", ":")) + "\n")
        super().finish(summary)
