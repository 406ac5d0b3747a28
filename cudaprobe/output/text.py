"""Text for the terminal: durations in their unit, text a traced process
controls made safe to show (`escape`), and names cut to a width in terminal
cells, never inside an escape (sizes are decode's humanize_bytes: a call's
details spell them already)."""

from __future__ import annotations

import re
from typing import Callable

from rich.cells import cell_len

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}
# one unit of escaped text: an escape as `_escaped` writes it, or one character
_UNIT = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|.)|.", re.S)
_ASCII_SAFE = re.compile(r"(?:[\x20-\x7e]|\r?\n)*")  # printable ASCII and line ends


def _escaped(char: str) -> str:
    if char.isprintable() and char != "\\":
        return char
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def escape(text: str) -> str:
    """Text a traced process controls (its name, the paths it maps, the names
    in its code, what it writes back), safe on a terminal, on one line.

    Every character Python does not call printable (Unicode's Other and
    Separator categories but the space: C0 and C1 controls, DEL, ESC, format
    characters such as the bidi overrides, line and paragraph separators,
    private use, unassigned, and the lone surrogates that undecodable bytes
    become) is written as strace writes it (`\\n`, `\\x1b`, `\\u202e`,
    `\\U000e0001`), and `\\` as `\\\\`, so that an escape is never ambiguous.
    The result holds no markup either: show it as rich `Text`, never as a
    markup string (demangled C++ holds `[`)."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(map(_escaped, text))


def _json_escaped(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP: JSON spells it as a surrogate pair
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"


def json_escape(text: str) -> str:
    """JSON text made safe on a terminal and still the same JSON: what `escape`
    escapes spelled `\\uXXXX`. (Outside its strings JSON text is printable.)"""
    return "".join(map(_json_escaped, text))


def terminal_lines(text: str, spell: Callable[[str], str] = escape) -> str:
    """Lines of a data format (CSV, JSON) shown on a terminal: each line's
    text through `spell` (`escape`, `json_escape`), its end (`\\n`, `\\r\\n`) kept."""
    if text.isascii() and _ASCII_SAFE.fullmatch(text):
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        body = line[:-1] if line.endswith("\r") and i < len(lines) - 1 else line
        if not body.isprintable():
            lines[i] = spell(body) + line[len(body):]
    return "\n".join(lines)


def cells(text: str) -> int:
    """How many terminal cells `text` takes (a CJK character two)."""
    return len(text) if text.isascii() else cell_len(text)


def _plain(text: str) -> bool:
    """ASCII with no escape in it: each character a unit of one cell (the fast
    path: most names are)."""
    return text.isascii() and "\\" not in text


def _fitting(units: list[str], room: int) -> int:
    """How many of `units`, from the first, fit in `room` cells."""
    used = 0
    for k, unit in enumerate(units):
        used += cells(unit)
        if used > room:
            return k
    return len(units)


def _head(text: str, room: int) -> str:
    """The start of `text` that fits in `room` cells, whole escapes."""
    if _plain(text):
        return text[: max(0, room)]
    units = _UNIT.findall(text)
    return "".join(units[: _fitting(units, room)])


def _tail(text: str, room: int) -> str:
    """The end of `text` that fits in `room` cells, whole escapes."""
    if _plain(text):
        return text[len(text) - room:] if room > 0 else ""
    units = _UNIT.findall(text)
    return "".join(units[len(units) - _fitting(units[::-1], room):])


def _fits(text: str, width: int) -> bool:
    return len(text) <= width if text.isascii() else cell_len(text) <= width


def cut_end(text: str, width: int) -> str:
    """`text` in `width` cells: cut at the end with `…`."""
    if _fits(text, width):
        return text
    return _head(text, width - 1) + "…" if width > 0 else ""


def cut_middle(text: str, width: int) -> str:
    """`text` in `width` cells, cut in the middle with `…`: the end of a name
    (its variant suffix, `_ptsz`, `_v2`) stays. Leading indentation is kept."""
    if _fits(text, width):
        return text
    name = text.lstrip(" ")
    indent = text[: len(text) - len(name)]
    room = width - len(indent)
    if room < 3:
        return cut_end(text, width)
    if _plain(name):  # the fast path: characters are cells
        tail_room = (room - 1) // 2
        return indent + name[: room - 1 - tail_room] + "…" + name[len(name) - tail_room:]
    tail = _tail(name, (room - 1) // 2)
    return indent + _head(name, room - 1 - cells(tail)) + "…" + tail


def cut_start(text: str, width: int) -> str:
    """`text` in `width` cells, cut at the start: a path's end, where its file
    name and line are."""
    if _fits(text, width):
        return text
    return "…" + _tail(text, width - 1) if width > 0 else ""


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` filled with spaces to `width` cells, on the left where `right`."""
    fill = " " * (width - cells(text))
    return fill + text if right else text + fill


def humanize_ns(ns: int) -> str:
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"
