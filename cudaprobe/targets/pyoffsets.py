"""Where CPython keeps what a stack walk reads, per version.

From 3.13 on the interpreter publishes it for tools: `_Py_DebugOffsets` at
the start of `_PyRuntime` (its cookie "xdebugpy", then PY_VERSION_HEX),
read here from the file's initialised data before the process runs. Before
3.13 each version's offsets are in LAYOUTS, as its own headers give them
(tests/unit/test_pyoffsets.py compiles an offsetof program against every
CPython's headers on the machine and compares).
"""

from __future__ import annotations

import struct
from dataclasses import astuple, dataclass


@dataclass(frozen=True)
class Layout:
    """struct cp_py_layout (bpf/pystacks.h), and what only the decoder needs."""

    runtime_interp_head: int
    interp_threads_head: int
    tstate_next: int
    tstate_thread_id: int
    tstate_frame: int
    cframe_current_frame: int
    frame_code: int
    frame_back: int
    frame_instr: int
    frame_owner: int
    code_firstlineno: int
    code_filename: int
    code_name: int
    code_linetable: int
    unicode_ascii_size: int
    bytes_sval: int
    thread_id_is_pthread: int
    instr_is_pointer: int
    # the decoder's: where the instructions start in a code object (3.11+),
    # and sizeof(PyCompactUnicodeObject), where non-ASCII data starts
    code_adaptive: int
    unicode_compact_size: int

    def bpf_values(self) -> tuple[int, ...]:
        """The fields of struct cp_py_layout, in order."""
        return astuple(self)[:18]


# (3, minor) -> its layout, from its headers (x86-64, default build)
LAYOUTS: dict[tuple[int, int], Layout] = {
    (3, 9): Layout(32, 8, 8, 176, 24, -1, 32, 24, 104, -1, 40, 104, 112, 120, 48, 32, 1, 0,
                   -1, 72),
    (3, 10): Layout(32, 8, 8, 176, 24, -1, 32, 24, 96, -1, 40, 104, 112, 120, 48, 32, 1, 0,
                    -1, 72),
    (3, 11): Layout(40, 16, 8, 160, 56, 8, 32, 48, 56, 69, 72, 112, 128, 136, 48, 32, 0, 1,
                    184, 72),
    (3, 12): Layout(40, 72, 8, 144, 56, 0, 0, 8, 56, 70, 68, 112, 128, 136, 40, 32, 0, 1,
                    192, 56),
}

DEBUG_COOKIE = b"xdebugpy"
# _Py_DebugOffsets of 3.13, as u64 words from its start (Include/internal/pycore_runtime.h)
_DEBUG_WORDS = 73
_W = {"interpreters_head": 5, "threads_head": 9, "ts_next": 21, "current_frame": 23,
      "native_thread_id": 25, "previous": 29, "executable": 30, "instr_ptr": 31, "owner": 33,
      "filename": 35, "qualname": 37, "linetable": 38, "firstlineno": 39, "co_code_adaptive": 43,
      "ob_sval": 66, "asciiobject_size": 70}
DEBUG_SIZE = 8 * _DEBUG_WORDS


def version_of_hex(hexversion: int) -> tuple[int, int]:
    return hexversion >> 24, (hexversion >> 16) & 0xFF


def from_debug_offsets(data: bytes) -> tuple[tuple[int, int], Layout] | None:
    """(version, layout) from the bytes of a 3.13 `_Py_DebugOffsets`; None where
    they are not one (no cookie, another version: its layout is not this one)."""
    if len(data) < DEBUG_SIZE or data[:8] != DEBUG_COOKIE:
        return None
    w = struct.unpack_from(f"<8x{_DEBUG_WORDS - 1}Q", data)
    version = version_of_hex(w[0])
    if version != (3, 13) or w[1]:  # free-threaded builds lay their objects out otherwise
        return None

    def at(name: str) -> int:
        return w[_W[name] - 1]
    ascii_size = at("asciiobject_size")
    return version, Layout(
        at("interpreters_head"), at("threads_head"), at("ts_next"), at("native_thread_id"),
        at("current_frame"), -1, at("executable"), at("previous"), at("instr_ptr"), at("owner"),
        at("firstlineno"), at("filename"), at("qualname"), at("linetable"), ascii_size,
        at("ob_sval"), 0, 1, at("co_code_adaptive"), ascii_size + 16)


def layout_for(version: tuple[int, int], debug: bytes = b"") -> Layout | None:
    """The layout of `version`: its debug offsets where it has them, else LAYOUTS."""
    if debug:
        found = from_debug_offsets(debug)
        if found is not None and found[0] == version:
            return found[1]
    return LAYOUTS.get(version)
