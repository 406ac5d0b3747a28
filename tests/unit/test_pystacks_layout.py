"""The Python mirror of bpf/pystacks.h (probe/pyrecords.py, pyoffsets.Layout)
must match the header byte for byte, and side records must be told apart
from call records by the ring reader."""

from __future__ import annotations

import pytest

from cudaprobe.probe import event
from cudaprobe.probe import pyrecords as pr
from cudaprobe.targets.pyoffsets import BPF_FIELDS, CODE_WINDOW, LAYOUTS, TSTATE_WINDOW

from .cprobe import c_values

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>
#include "pystacks.h"
#define S(t) printf("%s %zu\n", #t, sizeof(struct t));
#define O(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f));
#define C(n) printf("%s %d\n", #n, n);
int main(void) {
    S(cp_py_stack) S(cp_py_code) S(cp_py_frame) S(cp_py_proc) S(cp_py_exe) S(cp_py_exe_key)
    S(cp_py_layout)
    O(cp_py_stack, frames) O(cp_py_stack, nframes) O(cp_py_stack, ts_ns) O(cp_py_stack, kinds)
    O(cp_py_stack, lender) O(cp_py_stack, lender_count) O(cp_py_layout, gil_locked)
    O(cp_py_stack, node_seq) O(cp_py_stack, node_thread) S(cp_ag_proc)
    O(cp_py_code, filename) O(cp_py_code, name) O(cp_py_code, table) O(cp_py_code, name_state)
    O(cp_py_frame, ident) O(cp_py_code, ident)
    O(cp_py_layout, tstate_interp) O(cp_py_layout, unicode_compact_size)
    C(CP_PY_MAX_FRAMES) C(CP_PY_STR_MAX) C(CP_PY_NAME_MAX) C(CP_PY_STR_SLACK)
    C(CP_PY_TABLE_MAX) C(CP_PY_LAYOUTS) C(CP_SIDE_STACK) C(CP_SIDE_CODE) C(CP_PY_CUT)
    C(CP_PY_LIST_CHANGED) C(CP_PY_TOO_MANY) C(CP_PY_CODE_WINDOW) C(CP_PY_TSTATE_WINDOW)
    C(CP_PY_HANDED) C(CP_PY_ONLY) C(CP_PY_LENDERS_MANY) C(CP_SIDE_NODE) C(CP_PY_NODE)
    C(CP_PY_CODE) C(CP_PY_SHIM) C(CP_PY_NOT_CODE) C(CP_PY_FOUND) C(CP_PY_NONE)
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, int]:
    return c_values(tmp_path_factory.mktemp("pylayout"), PROBE)


def test_records_match_header(c_layout):
    assert c_layout["cp_py_stack"] == pr.STACK_SIZE
    assert c_layout["cp_py_stack.kinds"] == pr.KINDS_AT == pr.STACK_HEAD.size
    assert c_layout["cp_py_stack.frames"] == pr.FRAMES_AT
    assert c_layout["cp_py_stack.nframes"] == pr.STACK_HEAD.size - 28
    assert c_layout["cp_py_stack.lender"] == pr.STACK_HEAD.size - 24
    assert c_layout["cp_py_stack.lender_count"] == pr.STACK_HEAD.size - 20
    assert c_layout["cp_py_stack.node_seq"] == pr.STACK_HEAD.size - 16
    assert c_layout["cp_py_stack.node_thread"] == pr.STACK_HEAD.size - 8
    assert c_layout["cp_ag_proc"] == pr.AG_PROC.size
    assert c_layout["cp_py_stack.ts_ns"] == 16
    assert c_layout["cp_py_frame"] == pr.FRAME.size and c_layout["cp_py_frame.ident"] == 12
    assert c_layout["cp_py_code"] == pr.CODE_SIZE
    assert c_layout["cp_py_code.filename"] == pr.CODE_HEAD.size
    assert c_layout["cp_py_code.name_state"] == pr.CODE_HEAD.size - 8
    assert c_layout["cp_py_code.ident"] == pr.CODE_HEAD.size - 4
    assert c_layout["cp_py_code.name"] == pr.CODE_HEAD.size + pr.STR_MAX + pr.STR_SLACK
    assert c_layout["cp_py_code.table"] == (c_layout["cp_py_code.name"] + pr.NAME_MAX
                                            + pr.STR_SLACK)
    assert c_layout["cp_py_proc"] == pr.PROC.size
    assert c_layout["cp_py_exe"] == pr.EXE.size
    assert c_layout["cp_py_exe_key"] == pr.EXE_KEY.size
    assert c_layout["cp_py_layout"] == 4 * len(LAYOUTS[(3, 12)].bpf_values()) == 4 * BPF_FIELDS
    assert c_layout["cp_py_layout.tstate_interp"] == 4 * 18  # the fields in the mirror's order
    assert c_layout["cp_py_layout.unicode_compact_size"] == 4 * 21
    assert c_layout["cp_py_layout.gil_locked"] == 4 * (BPF_FIELDS - 1)


def test_constants_match_header(c_layout):
    assert (c_layout["CP_PY_MAX_FRAMES"], c_layout["CP_PY_STR_MAX"], c_layout["CP_PY_NAME_MAX"],
            c_layout["CP_PY_STR_SLACK"], c_layout["CP_PY_TABLE_MAX"], c_layout["CP_PY_LAYOUTS"]) \
        == (pr.MAX_FRAMES, pr.STR_MAX, pr.NAME_MAX, pr.STR_SLACK, pr.TABLE_MAX, pr.LAYOUTS)
    assert (c_layout["CP_SIDE_STACK"], c_layout["CP_SIDE_CODE"], c_layout["CP_PY_CUT"],
            c_layout["CP_PY_LIST_CHANGED"], c_layout["CP_PY_TOO_MANY"]) \
        == (pr.SIDE_STACK, pr.SIDE_CODE, pr.CUT, pr.LIST_CHANGED, pr.TOO_MANY)
    assert c_layout["CP_PY_CODE_WINDOW"] == CODE_WINDOW
    assert all(layout.code_fields_fit() for layout in LAYOUTS.values())
    assert c_layout["CP_PY_TSTATE_WINDOW"] == TSTATE_WINDOW
    assert all(layout.tstate_fields_fit() for layout in LAYOUTS.values())
    assert (c_layout["CP_PY_HANDED"], c_layout["CP_PY_ONLY"], c_layout["CP_PY_LENDERS_MANY"]) \
        == (pr.HANDED, pr.ONLY, pr.LENDERS_MANY)
    assert (c_layout["CP_SIDE_NODE"], c_layout["CP_PY_NODE"]) == (pr.SIDE_NODE, pr.NODE)
    assert (c_layout["CP_PY_CODE"], c_layout["CP_PY_SHIM"], c_layout["CP_PY_NOT_CODE"]) \
        == (pr.CODE, pr.SHIM, pr.NOT_CODE)
    assert (c_layout["CP_PY_FOUND"], c_layout["CP_PY_NONE"]) == (pr.FOUND, pr.NONE)


def test_side_records_are_longer_than_any_call_record():
    """The ring reader keeps the bytes of records longer than a whole event;
    the zero first word tells a side record from a named event."""
    assert min(pr.STACK_SIZE, pr.CODE_SIZE) > event.EVENT_SIZE
