"""Selecting functions and matching them to the symbols libraries export."""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass

from cudaprobe.catalogue.functions import CATEGORIES, FUNCTIONS, Function, is_default
from cudaprobe.errors import SymbolMissing, UnknownEvent, UsageError
from cudaprobe.targets.elf import as_file
from cudaprobe.targets.elfsyms import ElfSymbols, read_symbols
from cudaprobe.targets.libs import api_of
from cudaprobe.targets.openfile import OpenedFile


@dataclass(frozen=True)
class Probe:
    """One probed symbol: a catalogue function under the name it is exported as."""

    func_id: int
    symbol: str
    function: Function


ALL = "all"


def select_functions(events: list[str] | None, apis: set[str] | None = None,
                     search: bool = False) -> list[Function]:
    """Catalogue functions named by --events, in catalogue order.

    Without --events: the default set (catalogue.is_default: no getters, no
    hot getters, docs/events.md). Each comma-separated item is `all`, a category, a function
    name (any ABI version or variant symbol), or a glob of names
    (`cudaMemcpy*`, in any case); with `search` (`list`), a word that names
    nothing selects the names that contain it, in any case (`malloc`); a
    leading `!` takes the item out again, as strace's `-e trace=!open` does:
    `memory,!cudaFree`. Items that only take out start from the default set
    (`!cudaEventQuery`)."""
    pool = [f for f in FUNCTIONS if apis is None or f.api in apis]
    items = [e.strip() for spec in events or () for e in spec.split(",") if e.strip()]
    if events and not items:
        raise UsageError(f"-e {','.join(events)!r} names no function: give names, "
                         "categories or globs (see `cudaprobe list`)")
    chosen: set[str] = set()
    if not items or all(item.startswith("!") for item in items):
        chosen = {f.symbol for f in pool if is_default(f.name, f.category)}
    for item in items:
        if item.startswith("!"):
            chosen -= _matching(item[1:], pool, search)
        else:
            chosen |= _matching(item, pool, search)
    if not chosen:
        raise UsageError(f"-e {','.join(events or ())!r} selects no function: what it names "
                         "it also leaves out (see `cudaprobe list`)")
    return [f for f in pool if f.symbol in chosen]


def _matching(item: str, pool: list[Function], search: bool = False) -> set[str]:
    """The symbols (catalogue keys) of the functions one --events item names;
    with `search`, a word that names none selects the names that contain it."""
    if item == ALL:
        return {f.symbol for f in pool}
    if item in CATEGORIES:
        return {f.symbol for f in pool if f.category == item}
    if any(c in item for c in "*?["):  # a glob: case does not matter (`*memcpy*`)
        glob = item.lower()
        found = {f.symbol for f in pool
                 if fnmatch.fnmatchcase(f.name.lower(), glob)
                 or any(fnmatch.fnmatchcase(s.lower(), glob) for s in f.symbols)}
    else:  # a header name selects every ABI version of it (cuCtxCreate: _v2 and _v4)
        found = {f.symbol for f in pool if item == f.name or item in f.symbols}
    if not found and search:  # `list`: a word found in names, whatever its case
        word = item.lower()
        found = {f.symbol for f in pool
                 if word in f.name.lower() or any(word in s.lower() for s in f.symbols)}
    if not found:
        choices = [ALL, *CATEGORIES, *sorted({f.name for f in pool})]
        raise UnknownEvent(item, difflib.get_close_matches(item.strip("*?[]"), choices, n=3,
                                                           cutoff=0.6))
    return found


@dataclass(frozen=True)
class Attachment:
    probe: Probe
    file: OpenedFile  # attached through its descriptor, never by name
    offset: int  # file offset of the symbol
    vaddr: int  # its link-time address (bcc's perf-event attach wants it for ET_EXEC)
    is_pie_or_shared: bool

    @property
    def path(self) -> str:
        """The library as users are shown it."""
        return self.file.name


@dataclass
class ProbePlan:
    probes: list[Probe]
    attachments: list[Attachment]
    # base symbols of selected functions that no library defines (said loudly)
    not_found: list[str]


def attachments_in(probes: list[Probe], source: str | OpenedFile) -> list[Attachment]:
    """Where the file defines the probes' symbols: one attachment per symbol it has."""
    file = as_file(source)
    return _attachments(probes, read_symbols(file), file)


def _attachments(probes: list[Probe], table: ElfSymbols, file: OpenedFile) -> list[Attachment]:
    return [Attachment(p, file, table.functions[p.symbol], table.vaddrs[p.symbol],
                       table.is_pie_or_shared) for p in probes if p.symbol in table.functions]


def plan_probes(functions: list[Function], libraries: list[str | OpenedFile],
                every_symbol: bool = False) -> ProbePlan:
    """One probe per exported symbol (base name and variants), attached in every library.

    With `every_symbol`, every symbol of the functions gets a probe id, defined
    in `libraries` or not, so that a library found later (a traced process's
    dlopen) is attached with `attachments_in` and no new BPF program; finding
    nothing yet is then no error.
    """
    files = [as_file(library) for library in libraries]  # each opened once, here
    tables = [read_symbols(f) for f in files]
    defined = {s for t in tables for s in t.functions}
    symbols = [(s, fn) for fn in functions for s in fn.symbols if every_symbol or s in defined]
    probes = [Probe(i, symbol, fn) for i, (symbol, fn) in enumerate(symbols)]
    attachments = [a for t, f in zip(tables, files) for a in _attachments(probes, t, f)]
    names = [f.name for f in files]
    if not attachments and not every_symbol:
        raise SymbolMissing(", ".join(names), [f.name for f in functions])
    return ProbePlan(probes, attachments, missing_symbols(functions, names, defined))


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
