"""JSON: one document, `{"calls": [...], "summary": {...}}`, for `json.load`.

The calls are the JSONL reporter's objects (the same keys, the same fast
path from records), written as they come, separated by commas: the document
is whole once the trace has ended and the summary is written.
"""

from __future__ import annotations

import json

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output.jsonl import JsonlReporter


class JsonReporter(JsonlReporter):
    name = "json"
    extensions = (".json",)

    def start(self) -> None:
        self._sep = "\n"  # before the next call: none written yet
        self.stream.write('{"calls":[')

    def _write_lines(self, lines: list[str]) -> None:
        if lines:  # each line ends in its newline
            self.stream.write(self._sep + ",\n".join([line[:-1] for line in lines]))
            self._sep = ",\n"

    def calls(self, calls: list[Call]) -> None:
        self._write_lines(self.lines_of(calls))

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        self._write_lines(decoder.decode(records, self, nesting))

    def finish(self, summary: Summary) -> None:
        self.stream.write('\n],"summary":' + json.dumps(summary.to_dict(), separators=(",", ":"))
                          + "}\n")
        self.stream.flush()
