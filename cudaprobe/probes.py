"""Selecting functions and matching them to the symbols libraries export."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .catalogue import CATEGORIES, FUNCTIONS, Function
from .decode import Probe
from .elfsyms import read_symbols
from .errors import SymbolMissing, UnknownEvent
from .libs import api_of


def select_functions(events: list[str] | None, apis: set[str] | None = None) -> list[Function]:
    """Catalogue functions named by --events (function names or categories)."""
    pool = [f for f in FUNCTIONS if apis is None or f.api in apis]
    if not events:
        return pool
    # a header name selects every ABI version of it (cuCtxCreate: _v2 and _v4)
    by_name: dict[str, list[Function]] = {}
    for f in pool:
        by_name.setdefault(f.name, []).append(f)
    by_symbol = {s: [f] for f in pool for s in f.symbols}
    chosen: set[str] = set()
    for item in (e.strip() for spec in events for e in spec.split(",")):
        if not item:
            continue
        if item in CATEGORIES:
            chosen.update(f.symbol for f in pool if f.category == item)
        elif item in by_symbol or item in by_name:
            chosen.update(f.symbol for f in by_symbol.get(item) or by_name[item])
        else:
            choices = list(CATEGORIES) + list(by_name)
            raise UnknownEvent(item, difflib.get_close_matches(item, choices, n=3, cutoff=0.6))
    return [f for f in pool if f.symbol in chosen]


@dataclass(frozen=True)
class Attachment:
    probe: Probe
    path: str
    offset: int  # file offset of the symbol
    vaddr: int  # its link-time address (bcc's perf-event attach wants it for ET_EXEC)
    is_pie_or_shared: bool


@dataclass
class ProbePlan:
    probes: list[Probe]
    attachments: list[Attachment]
    # base symbols of selected functions that no library defines (said loudly)
    not_found: list[str]


def plan_probes(functions: list[Function], libraries: list[str]) -> ProbePlan:
    """One probe per exported symbol (base name and variants), attached in every library."""
    tables = [read_symbols(path) for path in libraries]
    # not finding the driver API in libcudart is no news: only say so for an API
    # that one of the libraries provides, or when one's API is unknown (an executable)
    apis = {api_of(path) for path in libraries}
    probes: list[Probe] = []
    attachments: list[Attachment] = []
    not_found: list[str] = []
    for fn in functions:
        for symbol in fn.symbols:
            where = [t for t in tables if symbol in t.functions]
            if not where:
                if symbol == fn.symbol and (fn.api in apis or None in apis):
                    not_found.append(symbol)
                continue
            probe = Probe(len(probes), symbol, fn)
            probes.append(probe)
            attachments += [Attachment(probe, t.path, t.functions[symbol], t.vaddrs[symbol],
                                       t.is_pie_or_shared) for t in where]
    if not probes:
        raise SymbolMissing(", ".join(libraries), [f.name for f in functions])
    return ProbePlan(probes, attachments, not_found)
