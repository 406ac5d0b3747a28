"""Selecting functions and matching them to the symbols libraries export."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from cudaprobe.catalogue.functions import CATEGORIES, FUNCTIONS, Function
from cudaprobe.errors import SymbolMissing, UnknownEvent
from cudaprobe.targets.elfsyms import ElfSymbols, read_symbols
from cudaprobe.targets.libs import api_of


@dataclass(frozen=True)
class Probe:
    """One probed symbol: a catalogue function under the name it is exported as."""

    func_id: int
    symbol: str
    function: Function


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


def attachments_in(probes: list[Probe], path: str) -> list[Attachment]:
    """Where `path` defines the probes' symbols: one attachment per symbol it has."""
    return _attachments(probes, read_symbols(path))


def _attachments(probes: list[Probe], table: ElfSymbols) -> list[Attachment]:
    return [Attachment(p, table.path, table.functions[p.symbol], table.vaddrs[p.symbol],
                       table.is_pie_or_shared) for p in probes if p.symbol in table.functions]


def plan_probes(functions: list[Function], libraries: list[str],
                every_symbol: bool = False) -> ProbePlan:
    """One probe per exported symbol (base name and variants), attached in every library.

    With `every_symbol`, every symbol of the functions gets a probe id, defined
    in `libraries` or not, so that a library found later (a traced process's
    dlopen) is attached with `attachments_in` and no new BPF program; finding
    nothing yet is then no error.
    """
    tables = [read_symbols(path) for path in libraries]
    defined = {s for t in tables for s in t.functions}
    symbols = [(s, fn) for fn in functions for s in fn.symbols if every_symbol or s in defined]
    probes = [Probe(i, symbol, fn) for i, (symbol, fn) in enumerate(symbols)]
    attachments = [a for t in tables for a in _attachments(probes, t)]
    if not attachments and not every_symbol:
        raise SymbolMissing(", ".join(libraries), [f.name for f in functions])
    return ProbePlan(probes, attachments, missing_symbols(functions, libraries, defined))


def missing_symbols(functions: list[Function], libraries: list[str],
                    defined: set[str]) -> list[str]:
    """Symbols of `functions` that none of `libraries` defines, worth saying.

    Not finding the driver API in libcudart is no news: only say so for an API
    that one of the libraries is named for, or defines some of (an executable
    with the runtime linked in statically provides the runtime API only).
    """
    apis = {api_of(path) for path in libraries}
    apis |= {fn.api for fn in functions if any(s in defined for s in fn.symbols)}
    return [fn.symbol for fn in functions if fn.symbol not in defined and fn.api in apis]
