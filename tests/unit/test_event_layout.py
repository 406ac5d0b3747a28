"""The Python mirror of bpf/cudaprobe.h (struct cp_event, the pairing entries, the
constants) must match the header byte for byte."""

from __future__ import annotations

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.decode import handles
from cudaprobe.probe import bpfprog, event

from .cprobe import c_values
from .eventbuild import pack_event

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>
#include "cudaprobe.h"
#define F(name) printf("%s %zu\n", #name, offsetof(struct cp_event, name));
int main(void) {
    printf("size %zu\n", sizeof(struct cp_event));
    F(ts_ns) F(duration_ns) F(pid) F(tid) F(func_id) F(nargs) F(nouts) F(ret) F(words) F(cfg)
    F(comm) F(caller) F(stack_id)
    printf("CP_EVENT_HEAD %zu\n", (size_t)CP_EVENT_HEAD);
    printf("CP_MAX_SLOTS %d\nCP_MAX_OUTS %d\nCP_CFG_WORDS %d\nCP_COMM_LEN %d\n",
           CP_MAX_SLOTS, CP_MAX_OUTS, CP_CFG_WORDS, CP_COMM_LEN);
    printf("CP_LOST_RINGBUF %d\nCP_LOST_PAIRING %d\nCP_WAKEUPS %d\nCP_NR_COUNTERS %d\n",
           CP_LOST_RINGBUF, CP_LOST_PAIRING, CP_WAKEUPS, CP_NR_COUNTERS);
    printf("CP_LOST_DEPTH %d\nCP_MAX_DEPTH %d\nstamp_size %zu\n", CP_LOST_DEPTH, CP_MAX_DEPTH,
           sizeof(struct cp_stamp));
    printf("trace_entry_size %zu\ntrace_entry_call %zu\n", sizeof(struct cp_trace_entry),
           offsetof(struct cp_trace_entry, call));
    printf("stats_entry_size %zu\nstats_entry_call %zu\n", sizeof(struct cp_stats_entry),
           offsetof(struct cp_stats_entry, call));
    printf("CP_ATTACHING %d\nCP_TRACING %d\nCP_STOPPING %d\nCP_STOPPED %d\n", CP_ATTACHING,
           CP_TRACING, CP_STOPPING, CP_STOPPED);
    printf("CP_TARGET_TRACED %d\nCP_TARGET_LINKING %d\n", CP_TARGET_TRACED, CP_TARGET_LINKING);
    printf("cfg_size %zu\n", sizeof(struct cp_probe_cfg));
    printf("CP_HANDLE_NAME_OFFSET %d\n", CP_HANDLE_NAME_OFFSET);
    printf("CP_NAME_MAX %d\nCP_FRAME_WORD %d\nframe_size %zu\n", CP_NAME_MAX, CP_FRAME_WORD,
           sizeof(struct cp_frame));
    printf("frame_offset %zu\n", offsetof(struct cp_frame, offset));
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, int]:
    return c_values(tmp_path_factory.mktemp("layout"), PROBE)


def test_size_and_offsets_match_header(c_layout):
    assert c_layout["size"] == event.EVENT_SIZE
    for name, offset in event.FIELD_OFFSETS.items():
        assert c_layout[name] == offset, name


def test_constants_match_header(c_layout):
    assert c_layout["CP_MAX_SLOTS"] == event.MAX_SLOTS == catalogue.MAX_SLOTS
    assert c_layout["CP_MAX_OUTS"] == event.MAX_OUTS == catalogue.MAX_OUTS
    assert c_layout["CP_CFG_WORDS"] == event.CFG_WORDS
    assert c_layout["CP_COMM_LEN"] == event.COMM_LEN
    assert c_layout["CP_LOST_RINGBUF"] == event.LOST_RINGBUF
    assert c_layout["CP_LOST_PAIRING"] == event.LOST_PAIRING
    assert c_layout["CP_WAKEUPS"] == event.WAKEUPS
    assert c_layout["CP_NR_COUNTERS"] == event.NR_COUNTERS
    assert c_layout["CP_LOST_DEPTH"] == event.LOST_DEPTH
    assert c_layout["CP_MAX_DEPTH"] == event.MAX_DEPTH
    # the pairing entries: the nesting count, then the call (the loader reads `call`)
    assert c_layout["stamp_size"] == 16
    assert c_layout["trace_entry_size"] == bpfprog.ENTRY_SIZES["trace"]
    assert c_layout["stats_entry_size"] == bpfprog.ENTRY_SIZES["stats"]
    assert c_layout["trace_entry_call"] == c_layout["stats_entry_call"] == 8
    assert [c_layout[k] for k in ("CP_ATTACHING", "CP_TRACING", "CP_STOPPING", "CP_STOPPED")] \
        == [event.ATTACHING, event.TRACING, event.STOPPING, event.STOPPED]
    assert (c_layout["CP_TARGET_TRACED"], c_layout["CP_TARGET_LINKING"]) == (
        event.TARGET_TRACED, event.TARGET_LINKING)
    assert c_layout["cfg_size"] == 52  # thirteen 4-byte words (bpfprog.probe_config)
    assert c_layout["CP_HANDLE_NAME_OFFSET"] == handles.NAME_POINTER_OFFSET
    assert c_layout["CP_EVENT_HEAD"] == event.HEAD_SIZE
    assert c_layout["CP_NAME_MAX"] == event.NAME_MAX
    assert c_layout["CP_FRAME_WORD"] == event.FRAME_WORD
    # struct cp_frame: struct bpf_stack_build_id (32 bytes, offset at 24), the address
    assert c_layout["frame_size"] == event.FRAME_STRUCT.size == 40
    assert c_layout["frame_offset"] == 24
    assert event.FRAME_WORD * 8 + event.FRAME_STRUCT.size <= event.CFG_WORDS * 8


def test_unpack_rejects_short_data():
    with pytest.raises(ValueError):
        event.unpack_event(b"\0" * (event.EVENT_SIZE - 1))


def test_records_carry_only_the_words_a_probe_has():
    malloc = catalogue.BY_NAME["cudaMalloc"]  # devPtr (out), size
    assert event.record_size(malloc) == event.HEAD_SIZE + 3 * 8
    launch = catalogue.BY_NAME["cudaLaunchKernelExC"]  # copies its config at entry
    assert event.record_size(launch) == event.EVENT_SIZE
    for fn in catalogue.FUNCTIONS:
        size = event.record_size(fn)
        assert event.RECORD_STRUCTS[(size - event.HEAD_SIZE) // 8].size == 8 + size


def test_a_record_decodes_its_outs_after_its_argument_words():
    n = 3
    rec = event.RECORD_STRUCTS[n].unpack(event.RECORD_STRUCTS[n].pack(
        5, 6, 7, 8, 9, 2, 1, 35, b"x", 0, -1, 0x10, 64, 0xABC))
    raw = event.from_record(rec)
    assert raw.args == (0x10, 64) + (0,) * (event.MAX_SLOTS - 2)
    assert raw.outs == (0xABC, 0, 0, 0)
    assert raw.cfg == event.NO_CFG and raw.func_id == 9 and raw.ret == 35


def test_a_failed_calls_record_has_no_out_words():
    """nouts 0: the kernel read none (the call failed); the record ends after its
    argument words, and the event has no outs at all, not zeros."""
    n = 2
    rec = event.RECORD_STRUCTS[n].unpack(event.RECORD_STRUCTS[n].pack(
        5, 6, 7, 8, 9, 2, 0, 35, b"x", 0, -1, 0x10, 64))
    raw = event.from_record(rec)
    assert raw.args == (0x10, 64) + (0,) * (event.MAX_SLOTS - 2)
    assert raw.outs == () and raw.ret == 35
    # a whole record keeps the out words, unread: nouts 0 says so
    whole = list(event.EVENT_STRUCT.unpack(pack_event(raw._replace(outs=(0xABC,)))))
    assert event.from_record(tuple(whole)).outs == (0xABC, 0, 0, 0)
    whole[event.R_NOUTS] = 0
    assert event.from_record(tuple(whole)).outs == ()


def test_packed_events_say_whether_their_outs_were_read():
    raw = event.RawEvent(1, 2, 3, 4, 5, 0, (7,) * event.MAX_SLOTS, (0xABC,), event.NO_CFG, "x")
    data = pack_event(raw)
    assert data[event.FIELD_OFFSETS["nouts"]] == event.MAX_OUTS
    assert event.unpack_event(data).outs == (0xABC, 0, 0, 0)
    data = pack_event(raw._replace(ret=35, outs=()))
    assert data[event.FIELD_OFFSETS["nouts"]] == 0
    assert event.unpack_event(data).outs == ()
