"""Kernel names read from a driver handle's object (late attach):
a handle points to an object that holds, at byte 8, a pointer to the mangled
name (driver 580's layout). Laid out here in this process's own memory and
read through /proc/self/mem, as cudaprobe reads a traced process's."""

from __future__ import annotations

import ctypes
import os

from cudaprobe.decode.handles import NAME_POINTER_OFFSET, KernelHandles

LONG = "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_" + "x" * 3000 + "E"


def handle_to(name: bytes) -> tuple[int, list]:
    """A stand-in driver object whose name pointer points to `name`; returns its
    address and what keeps the buffers alive."""
    text = ctypes.create_string_buffer(name)
    obj = (ctypes.c_uint64 * 4)()
    obj[NAME_POINTER_OFFSET // 8] = ctypes.addressof(text)
    return ctypes.addressof(obj), [text, obj]


def test_a_handle_made_before_the_attach_is_named_from_its_object():
    handles = KernelHandles()
    handle, keep = handle_to(b"_Z6vecAddPKfS0_Pfi")
    assert handles.name(os.getpid(), handle) == "_Z6vecAddPKfS0_Pfi"
    long_handle, keep2 = handle_to(LONG.encode())
    assert handles.name(os.getpid(), long_handle) == LONG  # whole, past any one read
    handles.close()
    del keep, keep2


def test_a_name_made_by_a_traced_call_comes_first():
    handles = KernelHandles()
    handle, keep = handle_to(b"in_memory")
    handles._names[(os.getpid(), handle)] = "made_by_the_call"
    assert handles.name(os.getpid(), handle) == "made_by_the_call"
    handles.close()
    del keep


def test_what_is_not_a_name_gives_none():
    handles = KernelHandles()
    pid = os.getpid()
    not_identifier, keep = handle_to(b"\x01\x02 not a name")
    assert handles.name(pid, not_identifier) is None
    obj = (ctypes.c_uint64 * 4)()
    obj[1] = 0x10  # a pointer into nothing mapped
    assert handles.name(pid, ctypes.addressof(obj)) is None
    assert handles.name(pid, 0x1000) is None  # the handle itself unmapped
    assert handles.name(pid, 0) is None
    gone = 2 ** 22 + 7  # a pid above pid_max's default: no /proc entry
    assert handles.name(gone, ctypes.addressof(obj)) is None
    handles.close()
    del keep, obj


def test_each_handle_is_read_once():
    handles = KernelHandles()
    handle, keep = handle_to(b"first_name")
    assert handles.name(os.getpid(), handle) == "first_name"
    keep[0].value = b"other_name"  # the driver's objects do not change; one read is kept
    assert handles.name(os.getpid(), handle) == "first_name"
    handles.close()
    del keep
