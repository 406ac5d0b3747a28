"""JSON Lines: one object per call, then one `{"summary": ...}` trailer line."""

from __future__ import annotations

import json

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.records import RecordDecoder, json_line
from cudaprobe.output.base import Reporter


class JsonlReporter(Reporter):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def calls(self, calls: list[Call]) -> None:
        self.stream.write("".join([json_line(c) + "\n" for c in calls]))

    def write_records(self, decoder: RecordDecoder, records: list[tuple],
                      summary: Summary) -> None:
        """What calls() writes for decoder.calls(records), made from the records
        (the session's fast path: no Call per event when only the file wants them)."""
        self.stream.write(decoder.jsonl(records, summary))

    def finish(self, summary: Summary) -> None:
        self.stream.write(json.dumps({"summary": summary.to_dict()}, separators=(",", ":")) + "\n")
        super().finish(summary)
