"""How cudaprobe counts what it traces, said the same way by trace, doctor and
list: functions (catalogue entries: cudaMemcpyAsync) and symbols (the names
exported and probed: cudaMemcpyAsync and cudaMemcpyAsync_ptsz). Names in, so
that it holds however the catalogue is built."""

from __future__ import annotations

from collections.abc import Iterable


def count_text(functions: Iterable[str], symbols: Iterable[str]) -> str:
    """`42 functions, 58 symbols`: distinct function names, distinct symbols."""
    nf, ns = len(set(functions)), len(set(symbols))
    return f"{nf} function{'' if nf == 1 else 's'}, {ns} symbol{'' if ns == 1 else 's'}"
