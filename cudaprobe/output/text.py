"""Text for the terminal: durations in their unit, and names cut to a width
(sizes are decode's humanize_bytes: a call's details spell them already)."""

from __future__ import annotations


def cut_end(text: str, width: int) -> str:
    """`text` in `width` characters: cut at the end with `…`."""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…" if width > 0 else ""


def cut_middle(text: str, width: int) -> str:
    """`text` in `width` characters, cut in the middle with `…`: the end of a name
    (its variant suffix, `_ptsz`, `_v2`) stays. Leading indentation is kept."""
    if len(text) <= width:
        return text
    name = text.lstrip(" ")
    indent = text[: len(text) - len(name)]
    room = width - len(indent)
    if room < 3:
        return cut_end(text, width)
    tail = (room - 1) // 2
    return indent + name[: room - 1 - tail] + "…" + name[len(name) - tail:]


def humanize_ns(ns: int) -> str:
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f}ms"
    return f"{ns / 1e9:.2f}s"


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


def _escaped(char: str) -> str:
    if char.isprintable() and char != "\\":
        return char
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape(text: str) -> str:
    """Text a traced process controls (its name, the paths it maps, the names
    in its code), safe on a terminal, one line: control and other unprintable
    characters escaped as strace does (`\\n`, `\\x1b`, `\\u202e`), and `\\` as
    `\\\\` so that an escape is never ambiguous."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(map(_escaped, text))
