"""Reporters: `--format` picks one by name, or `-o FILE` by its extension."""

from __future__ import annotations

from cudaprobe.errors import UsageError
from cudaprobe.output.base import Reporter
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.csv import CsvReporter
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.table import TableReporter

REPORTERS: dict[str, type[Reporter]] = {
    r.name: r for r in (TableReporter, JsonlReporter, CsvReporter, ChromeReporter)
}
FORMATS = tuple(REPORTERS)


def choose_format(fmt: str | None, output: str | None) -> str:
    """--format wins; else the -o extension (the longest that matches: x.chrome.json
    is chrome, x.json JSONL); else the table."""
    if fmt:
        if fmt not in REPORTERS:
            raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    if output:
        path = output.lower()
        matches = [(len(ext), name) for name, cls in REPORTERS.items() for ext in cls.extensions
                   if path.endswith(ext)]
        if matches:
            return max(matches)[1]
    return "table"


__all__ = ["FORMATS", "REPORTERS", "Reporter", "choose_format"]
