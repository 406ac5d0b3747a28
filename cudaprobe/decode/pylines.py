"""A CPython code object's line at an instruction, and its strings, from the
bytes the probe copied (struct cp_py_code): pure Python, per version.

Line tables: co_lnotab (3.9: byte offsets), the PEP 626 table (3.10:
co_linetable, byte offsets), the location table (3.11 on: co_linetable, in
code units). Each gives the line executing at the offset the frame holds,
not the function's first line. None where the table says there is none, or
the part kept (CP_PY_TABLE_MAX bytes) ends before the offset.
"""

from __future__ import annotations


def lnotab_line(table: bytes, firstlineno: int, offset: int) -> int | None:
    """3.9: co_lnotab pairs (address step, signed line step); `offset` in bytes."""
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        addr += table[i]
        if addr > offset:
            return line
        step = table[i + 1]
        line += step - 256 if step >= 128 else step
    return line if addr <= offset else None


def pep626_line(table: bytes, firstlineno: int, offset: int) -> int | None:
    """3.10: co_linetable pairs (bytes covered, signed line step; -128: no line)."""
    line, addr = firstlineno, 0
    for i in range(0, len(table) - 1, 2):
        end = addr + table[i]
        step = table[i + 1]
        step = step - 256 if step >= 128 else step
        if step != -128:
            line += step
        if addr <= offset < end:
            return None if step == -128 else line
        addr = end
    return None


def _varint(table: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = table[i]
        i += 1
        value |= (b & 63) << shift
        if not b & 64:
            return value, i
        shift += 6


def _svarint(table: bytes, i: int) -> tuple[int, int]:
    v, i = _varint(table, i)
    return (-(v >> 1) if v & 1 else v >> 1), i


def location_line(table: bytes, firstlineno: int, offset: int) -> int | None:
    """3.11+: the location table (Objects/locations.md); `offset` in code units."""
    line, addr, i, n = firstlineno, 0, 0, len(table)
    try:
        while i < n:
            first = table[i]
            if not first & 0x80:
                return None  # not at an entry's start: the table is not one
            code, length = (first >> 3) & 15, (first & 7) + 1
            i += 1
            here: int | None = line
            if code == 15:  # no location
                here = None
            elif code == 14:  # long form: line delta, end line, columns
                delta, i = _svarint(table, i)
                line += delta
                here = line
                for _ in range(3):
                    _, i = _varint(table, i)
            elif code == 13:  # no columns
                delta, i = _svarint(table, i)
                line += delta
                here = line
            elif code >= 10:  # one line form: delta code - 10, two column bytes
                line += code - 10
                here = line
                i += 2
            else:  # short form: same line, one column byte
                i += 1
            if addr <= offset < addr + length:
                return here
            addr += length
    except IndexError:
        return None  # cut where CP_PY_TABLE_MAX ends
    return None


def line_at(version: tuple[int, int], table: bytes, firstlineno: int,
            offset: int) -> int | None:
    """The line at `offset` (3.9: f_lasti in bytes; 3.10: f_lasti in code units;
    3.11+: the instruction's index in code units)."""
    if version >= (3, 11):
        return location_line(table, firstlineno, offset)
    if version == (3, 10):
        return pep626_line(table, firstlineno, offset * 2)
    return lnotab_line(table, firstlineno, offset)


ELLIPSIS = "\u2026"  # ends a name cut where the probe's copy of it ends
_UNITS = {2: "H", 4: "I"}  # UCS-2 and UCS-4 code units, as CPython keeps them


def unicode_text(state: int, length: int, data: bytes, compact_extra: int
                 ) -> tuple[str, bool] | None:
    """A str object's text from its state word, length (code points) and the
    bytes copied from its ASCII data on, and whether it was cut: a string
    longer than the copy keeps what the copy holds, then ELLIPSIS. None where it
    is not a compact string, or its bytes are not text of its kind.
    `compact_extra`: how much further a non-ASCII string's data is."""
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4):
        return None
    start = 0 if ascii_ else compact_extra
    kept = min(length, max(0, len(data) - start) // kind)
    raw = data[start : start + kept * kind]
    try:
        if kind == 1:
            text = raw.decode("ascii" if ascii_ else "latin-1")
        else:  # code points one a unit, lone surrogates too (undecodable file names)
            text = "".join(map(chr, memoryview(raw).cast(_UNITS[kind])))
    except (UnicodeDecodeError, ValueError):
        return None
    return (text + ELLIPSIS, True) if kept < length else (text, False)
