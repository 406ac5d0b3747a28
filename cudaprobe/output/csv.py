"""CSV: the JSONL keys as columns, `args` as a JSON object in one cell."""

from __future__ import annotations

import csv
import json

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import JSONL_KEYS, Call
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output.base import Reporter


class CsvReporter(Reporter):
    name = "csv"
    extensions = (".csv",)

    def start(self) -> None:
        self._writer = csv.writer(self.stream)
        self._writer.writerow(JSONL_KEYS)

    def calls(self, calls: list[Call]) -> None:
        self._writer.writerows([csv_row(c) for c in calls])

    def write_records(self, decoder: RecordDecoder, records: list[tuple],
                      summary: Summary) -> None:
        """What calls() writes for decoder.calls(records), made from the records
        (the session's fast path: no Call per event when only the file wants them)."""
        self._writer.writerows(decoder.csv_rows(records, summary, csv_row))


def csv_row(call: Call) -> list:
    row = call.to_dict()
    row["args"] = json.dumps(row["args"], separators=(",", ":"))
    return [row[k] for k in JSONL_KEYS]
