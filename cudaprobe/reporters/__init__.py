"""Reporters: `--format` picks one by name, or `-o FILE` by its extension."""

from __future__ import annotations

import os

from ..errors import UsageError
from .base import Reporter
from .csv import CsvReporter
from .jsonl import JsonlReporter
from .table import TableReporter

REPORTERS: dict[str, type[Reporter]] = {
    r.name: r for r in (TableReporter, JsonlReporter, CsvReporter)
}
FORMATS = tuple(REPORTERS)


def choose_format(fmt: str | None, output: str | None) -> str:
    """--format wins; else the -o extension; else the table."""
    if fmt:
        if fmt not in REPORTERS:
            raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    if output:
        ext = os.path.splitext(output)[1].lower()
        for name, cls in REPORTERS.items():
            if ext in cls.extensions:
                return name
    return "table"


__all__ = ["FORMATS", "REPORTERS", "Reporter", "choose_format"]
