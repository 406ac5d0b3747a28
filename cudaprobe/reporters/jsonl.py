"""JSON Lines: one object per call, then one `{"summary": ...}` trailer line."""

from __future__ import annotations

import json

from ..decode import Call
from ..decoders import json_line
from ..summary import Summary
from .base import Reporter


class JsonlReporter(Reporter):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def calls(self, calls: list[Call]) -> None:
        self.stream.write("".join([json_line(c) + "\n" for c in calls]))

    def finish(self, summary: Summary) -> None:
        self.stream.write(json.dumps({"summary": summary.to_dict()}, separators=(",", ":")) + "\n")
        super().finish(summary)
