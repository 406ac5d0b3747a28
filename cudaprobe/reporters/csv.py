"""CSV: the JSONL keys as columns, `args` as a JSON object in one cell."""

from __future__ import annotations

import csv
import json

from ..decode import JSONL_KEYS, Call
from .base import Reporter


class CsvReporter(Reporter):
    name = "csv"
    extensions = (".csv",)

    def start(self) -> None:
        self._writer = csv.writer(self.stream)
        self._writer.writerow(JSONL_KEYS)

    def calls(self, calls: list[Call]) -> None:
        for c in calls:
            row = c.to_dict()
            row["args"] = json.dumps(row["args"], separators=(",", ":"))
            self._writer.writerow([row[k] for k in JSONL_KEYS])
