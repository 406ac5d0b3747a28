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
    """struct cp_py_layout (bpf/pystacks.h), in its order, and what only the
    decoder needs."""

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
    tstate_interp: int
    tstate_id: int
    code_version: int  # co_version (3.12+), -1 before
    unicode_compact_size: int  # sizeof(PyCompactUnicodeObject): where non-ASCII data starts
    # whether a thread state has released the GIL (borrowed stacks): 3.13's own
    # word for it, PyThreadState.state; before, the GIL's holder and lock, the
    # GIL in _PyRuntime (up to 3.11) or at the interpreter's pointer (3.12+)
    tstate_state: int
    gil_in_runtime: int
    gil_in_interp: int
    gil_last_holder: int
    gil_locked: int
    # the decoder's: where the instructions start in a code object (3.11+)
    code_adaptive: int

    def bpf_values(self) -> tuple[int, ...]:
        """The fields of struct cp_py_layout, in order."""
        return astuple(self)[:BPF_FIELDS]

    def code_fields_fit(self) -> bool:
        """Every field the probe reads of a code object lies in the bytes it reads
        of it at once (CP_PY_CODE_WINDOW)."""
        ends = [self.code_firstlineno + 4, self.code_filename + 8, self.code_name + 8,
                self.code_linetable + 8, self.code_version + 4]
        return max(ends) <= CODE_WINDOW

    def tstate_fields_fit(self) -> bool:
        """Every field the lenders' walk reads of a thread state lies in the bytes
        it reads of it at once (CP_PY_TSTATE_WINDOW)."""
        ends = [self.tstate_next + 8, self.tstate_interp + 8, self.tstate_thread_id + 8,
                self.tstate_frame + 8, self.tstate_id + 8, self.tstate_state + 4]
        return max(ends) <= TSTATE_WINDOW


BPF_FIELDS = 27  # struct cp_py_layout's: all but the last
CODE_WINDOW = 144  # CP_PY_CODE_WINDOW (bpf/pystacks.h)
TSTATE_WINDOW = 272  # CP_PY_TSTATE_WINDOW (bpf/pystacks.h)

# what every version up to 3.13 keeps where
_COMMON = {"runtime_interp_head": 32, "interp_threads_head": 8, "tstate_next": 8,
           "tstate_interp": 16, "cframe_current_frame": -1, "frame_owner": -1,
           "code_version": -1, "bytes_sval": 32, "code_adaptive": -1,
           "tstate_state": -1, "gil_in_runtime": 352, "gil_in_interp": -1,
           "gil_last_holder": 8, "gil_locked": 16}
_BEFORE_311 = {**_COMMON, "tstate_thread_id": 176, "tstate_frame": 24, "frame_code": 32,
               "frame_back": 24, "code_firstlineno": 40, "code_filename": 104,
               "code_name": 112, "code_linetable": 120, "unicode_ascii_size": 48,
               "unicode_compact_size": 72, "thread_id_is_pthread": 1, "instr_is_pointer": 0}
_FROM_311 = {**_COMMON, "runtime_interp_head": 40, "tstate_frame": 56, "frame_instr": 56,
             "code_filename": 112, "code_name": 128, "code_linetable": 136,
             "thread_id_is_pthread": 0, "instr_is_pointer": 1}

# (3, minor) -> its layout, from its headers (x86-64, default build)
LAYOUTS: dict[tuple[int, int], Layout] = {
    (3, 9): Layout(**{**_BEFORE_311, "frame_instr": 104, "tstate_id": 256}),
    (3, 10): Layout(**{**_BEFORE_311, "frame_instr": 96, "tstate_id": 256}),
    (3, 11): Layout(**{**_FROM_311, "interp_threads_head": 16, "tstate_thread_id": 160,
                       "cframe_current_frame": 8, "frame_code": 32, "frame_back": 48,
                       "frame_owner": 69, "code_firstlineno": 72, "unicode_ascii_size": 48,
                       "unicode_compact_size": 72, "tstate_id": 240, "code_adaptive": 184,
                       "gil_in_runtime": 360}),
    (3, 12): Layout(**{**_FROM_311, "interp_threads_head": 72, "tstate_thread_id": 144,
                       "cframe_current_frame": 0, "frame_code": 0, "frame_back": 8,
                       "frame_owner": 70, "code_firstlineno": 68, "unicode_ascii_size": 40,
                       "unicode_compact_size": 56, "tstate_id": 224, "code_version": 92,
                       "code_adaptive": 192, "gil_in_runtime": -1, "gil_in_interp": 384}),
}

DEBUG_COOKIE = b"xdebugpy"
# _Py_DebugOffsets of 3.13, as u64 words from its start (Include/internal/pycore_runtime.h)
_DEBUG_WORDS = 73
_W = {"interpreters_head": 5, "threads_head": 9, "ts_next": 21, "ts_interp": 22,
      "current_frame": 23,
      "native_thread_id": 25, "previous": 29, "executable": 30, "instr_ptr": 31, "owner": 33,
      "filename": 35, "qualname": 37, "linetable": 38, "firstlineno": 39, "co_code_adaptive": 43,
      "ob_sval": 66, "asciiobject_size": 70}
DEBUG_SIZE = 8 * _DEBUG_WORDS
# what the probe reads that 3.13's _Py_DebugOffsets does not publish, from its
# headers (tests/unit/test_pyoffsets.py compiles against them): the thread
# state's unique id and state (attached or not), the code object's co_version,
# where its GIL is (read where the state is not: never, kept for the check)
UNPUBLISHED_313 = {"tstate_id": 224, "code_version": 92, "tstate_state": 40,
                   "gil_in_runtime": -1, "gil_in_interp": 16, "gil_last_holder": 8,
                   "gil_locked": 16}


def version_of_hex(hexversion: int) -> tuple[int, int]:
    return hexversion >> 24, (hexversion >> 16) & 0xFF


def from_debug_offsets(data: bytes) -> tuple[tuple[int, int], Layout] | None:
    """(version, layout) from the bytes of a 3.13 `_Py_DebugOffsets`; None where
    they are not one (no cookie, another version: its layout is not this one),
    or where a code object's or thread state's fields lie past what the probe
    reads of it."""
    if len(data) < DEBUG_SIZE or data[:8] != DEBUG_COOKIE:
        return None
    w = struct.unpack_from(f"<8x{_DEBUG_WORDS - 1}Q", data)
    version = version_of_hex(w[0])
    if version != (3, 13) or w[1]:  # free-threaded builds lay their objects out otherwise
        return None

    def at(name: str) -> int:
        return w[_W[name] - 1]
    ascii_size = at("asciiobject_size")
    layout = Layout(
        runtime_interp_head=at("interpreters_head"), interp_threads_head=at("threads_head"),
        tstate_next=at("ts_next"), tstate_thread_id=at("native_thread_id"),
        tstate_frame=at("current_frame"), cframe_current_frame=-1,
        frame_code=at("executable"), frame_back=at("previous"), frame_instr=at("instr_ptr"),
        frame_owner=at("owner"), code_firstlineno=at("firstlineno"),
        code_filename=at("filename"), code_name=at("qualname"),
        code_linetable=at("linetable"), unicode_ascii_size=ascii_size,
        bytes_sval=at("ob_sval"), thread_id_is_pthread=0, instr_is_pointer=1,
        tstate_interp=at("ts_interp"), unicode_compact_size=ascii_size + 16,
        code_adaptive=at("co_code_adaptive"), **UNPUBLISHED_313)
    fits = layout.code_fields_fit() and layout.tstate_fields_fit()
    return (version, layout) if fits else None


def layout_for(version: tuple[int, int], debug: bytes = b"") -> Layout | None:
    """The layout of `version`: its debug offsets where it has them, else LAYOUTS."""
    if debug:
        found = from_debug_offsets(debug)
        if found is not None and found[0] == version:
            return found[1]
    return LAYOUTS.get(version)
