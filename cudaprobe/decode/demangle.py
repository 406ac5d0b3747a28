"""C++ kernel names: demangling (libstdc++'s __cxa_demangle) and a short form.

`demangle` goes through ctypes rather than a c++filt process per name: a
PyTorch run resolves hundreds of kernels, and libstdc++ is already loaded by
bcc. But __cxa_demangle refuses any name over 1024 characters (libiberty's
guard against deep recursion, PR 87675, which only an option that
__cxa_demangle does not pass turns off), and PyTorch's template kernels run
to kilobytes: those go to `c++filt --no-recurse-limit` (binutils >= 2.31), one
process per name, cached. Where neither can be had, names stay mangled
(still whole, unique and searchable) rather than failing the trace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import shutil
import subprocess

SHORT_LIMIT = 60  # longer names are shortened in the table; JSONL keeps them whole
CXA_LIMIT = 1024  # the longest mangled name __cxa_demangle takes (2 * len <= 2048)
CXXFILT_TIMEOUT_S = 5


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr] | None:
    try:
        stdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    fn = stdcxx.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_int)]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    return fn, free


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """`_Z6vecAddPKfS0_Pfi` -> `vecAdd(float const*, float const*, float*, int)`; names
    that are not mangled (extern "C" kernels) come back unchanged."""
    if not name.startswith("_Z"):
        return name
    if len(name) > CXA_LIMIT:
        return _cxxfilt(name)
    api = _cxa_demangle()
    if api is None:
        return name
    cxa_demangle, free = api
    status = ctypes.c_int(0)
    out = cxa_demangle(name.encode(), None, None, ctypes.byref(status))
    if not out:
        return name
    try:
        text = ctypes.string_at(out).decode("utf-8", "replace")
    finally:
        free(out)
    return text if status.value == 0 else name


def _cxxfilt(name: str) -> str:
    """A name too long for __cxa_demangle, through binutils' c++filt, or as it is."""
    tool = shutil.which("c++filt")
    if tool is None:
        return name
    try:
        out = subprocess.run([tool, "--no-recurse-limit"], input=name, capture_output=True,
                             text=True, timeout=CXXFILT_TIMEOUT_S, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return name
    return out or name


def _matching_open(text: str, close: int, pair: str) -> int:
    """Index of the bracket opening the one at `close` (pair is "()" or "<>")."""
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == pair[1]:
            depth += 1
        elif text[i] == pair[0]:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _drop_parameters(name: str) -> str:
    end = name.rstrip()
    for suffix in (" const", " volatile", " &&", " &"):
        if end.endswith(suffix):
            end = end[: -len(suffix)]
    if end.endswith(")"):
        start = _matching_open(end, len(end) - 1, "()")
        if start > 0:
            return end[:start]
    return name


def _drop_return_type(name: str) -> str:
    """`void ns::f<int>` -> `ns::f<int>`: cut at the last space outside brackets."""
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        c = name[i]
        if c in ">)":
            depth += 1
        elif c in "<(":
            depth -= 1
        elif c == " " and depth == 0:
            return name[i + 1 :]
    return name


def _collapse_templates(name: str) -> str:
    """`f<a<b>, c>` -> `f<…>`: keep the outermost brackets, drop what is inside."""
    out, depth = [], 0
    for c in name:
        if c == "<":
            if depth == 0:
                out.append("<…")
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(c)
    return "".join(out)


def shorten(name: str, limit: int = SHORT_LIMIT) -> str:
    """A table-sized form of a demangled name: whole if it fits in `limit`, else
    without parameters and return type, then with template arguments elided.
    (Remembered: a trace names the same few hundred kernels in every row.)"""
    if len(name) <= limit:
        return name
    return _shortened(name, limit)


@functools.lru_cache(maxsize=8192)
def _shortened(name: str, limit: int) -> str:
    short = _drop_return_type(_drop_parameters(name))
    if len(short) > limit:
        short = _collapse_templates(short)
    return short
