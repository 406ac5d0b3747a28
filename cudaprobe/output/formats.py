"""Reporters: `--format` picks one by name, or `-o FILE` by its extension.

`format_of_output` is the one rule for every command that writes a report
(trace's reporters here, stats' and memory's table or JSON): the longest
extension that matches names the format (`x.chrome.json` is chrome, `x.json`
a JSON document, never JSON Lines); no match, the table.
"""

from __future__ import annotations

from collections.abc import Mapping

from cudaprobe.decode.schema import ROW_SCHEMA
from cudaprobe.errors import UsageError
from cudaprobe.output.base import Reporter
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.csv import CsvReporter
from cudaprobe.output.files import GZIP_SUFFIX
from cudaprobe.output.json_document import JsonReporter
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.table import TableReporter

REPORTERS: dict[str, type[Reporter]] = {
    r.name: r for r in (TableReporter, JsonlReporter, JsonReporter, CsvReporter, ChromeReporter)
}
FORMATS = tuple(REPORTERS)
# the reports of stats and memory: a table, or one JSON document
REPORT_EXTENSIONS: dict[str, tuple[str, ...]] = {"table": TableReporter.extensions,
                                                 "json": JsonReporter.extensions}


def format_of_output(fmt: str | None, output: str | None,
                     extensions: Mapping[str, tuple[str, ...]]) -> str:
    """--format wins; else the -o extension (the longest that matches); else the table.
    `extensions`: format name -> the extensions that pick it."""
    if fmt:
        if fmt not in extensions:
            raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(extensions)}")
        return fmt
    if output and output != "-":
        path = output.lower().removesuffix(GZIP_SUFFIX)  # calls.jsonl.gz: JSONL, compressed
        matches = [(len(ext), name) for name, exts in extensions.items() for ext in exts
                   if path.endswith(ext)]
        if matches:
            return max(matches)[1]
    return "table"


def choose_format(fmt: str | None, output: str | None) -> str:
    """trace's reporter: format_of_output over REPORTERS."""
    return format_of_output(fmt, output, {name: r.extensions for name, r in REPORTERS.items()})


def schema_table() -> str:
    """The row schema (decode/schema.py) as docs/formats.md's Markdown table."""
    lines = ["| key | type | meaning |", "| --- | --- | --- |"]
    lines += [f"| {', '.join(f'`{n}`' for n in key.names)} | {key.type} | {key.meaning} |"
              for key in ROW_SCHEMA]
    return "\n".join(lines) + "\n"


__all__ = ["FORMATS", "REPORTERS", "REPORT_EXTENSIONS", "Reporter", "choose_format", "schema_table",
           "format_of_output"]
