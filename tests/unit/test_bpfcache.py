"""The compiled-program cache's pure parts: the key, the relocation of map
descriptors, and the entry's format (probe/bpfcache.py). The cache on disk and
a program loaded from it: tests/integration/test_bpf_cache.py."""

from __future__ import annotations

import struct

import pytest

from cudaprobe.probe import bpfcache
from cudaprobe.probe.bpfcache import INSN, LD_IMM64, NotRelocatable


def ld_imm64(src: int, imm: int, high: int = 0, dst: int = 1) -> bytes:
    return INSN.pack(LD_IMM64, dst | src << 4, 0, imm) + INSN.pack(0, 0, 0, high)


MOV = INSN.pack(0xB7, 0, 0, 7)  # r0 = 7
CALL = INSN.pack(0x85, 0, 0, 1)  # call bpf_map_lookup_elem
EXIT = INSN.pack(0x95, 0, 0, 0)


def program_insns(first_fd: int, second_fd: int) -> bytes:
    """A map by descriptor, a constant, a map value by descriptor and offset."""
    return (ld_imm64(1, first_fd) + MOV + CALL + ld_imm64(0, 123, 4)
            + ld_imm64(2, second_fd, 16) + EXIT)


def imms(insns: bytes) -> list[int]:
    return [INSN.unpack_from(insns, i)[3] for i in range(0, len(insns), INSN.size)]


def test_map_descriptors_are_kept_as_places_and_written_anew():
    canonical, relocations = bpfcache.relocatable(program_insns(7, 9), {7: 0, 9: 1})
    assert relocations == ((0, 0), (6, 1))
    assert canonical == program_insns(0, 0)  # nothing of this session's descriptors
    function = bpfcache.Function("f", canonical, relocations)
    assert bpfcache.relocate(function, [40, 41]) == program_insns(40, 41)
    # the constant's load and the value's offset (second halves) untouched
    assert imms(bpfcache.relocate(function, [40, 41])) == [40, 0, 7, 1, 123, 4, 41, 16, 0]


@pytest.mark.parametrize("insns, why", [
    (ld_imm64(1, 8), "names descriptor 8"),  # not one of the program's maps
    (ld_imm64(5, 0), "of kind 5"),  # BPF_PSEUDO_MAP_IDX: not bcc's
    (ld_imm64(1, 7)[:8], "cut short"),
    (MOV[:5], "whole number"),
])
def test_what_does_not_refer_to_the_programs_maps_is_not_kept(insns, why):
    with pytest.raises(NotRelocatable, match=why):
        bpfcache.relocatable(insns, {7: 0})


@pytest.mark.parametrize("function, why", [
    (bpfcache.Function("f", ld_imm64(1, 0), ()), "does not relocate"),
    (bpfcache.Function("f", ld_imm64(1, 3), ((0, 0),)), "does not relocate"),  # not zeroed
    (bpfcache.Function("f", MOV + ld_imm64(1, 0), ((0, 0), (1, 0))), "are not map loads"),
    (bpfcache.Function("f", ld_imm64(1, 0), ((0, 2),)), "map 2 of 1"),
])
def test_relocations_that_do_not_match_their_instructions_are_refused(function, why):
    with pytest.raises(NotRelocatable, match=why):
        bpfcache.relocate(function, [40])


def program() -> bpfcache.Program:
    canonical, relocations = bpfcache.relocatable(program_insns(7, 9), {7: 0, 9: 1})
    maps = (bpfcache.Map("probes", 2, 4, 8, 16, 0, '"unsigned int"', '"unsigned long long"'),
            bpfcache.Map("events", 27, 0, 0, 4096 * 4096, 0, '"int"', '"int"'))
    return bpfcache.Program("GPL", 0, maps, (
        bpfcache.Function("cp_enter", canonical, relocations),
        bpfcache.Function("tracepoint__sched__sched_process_fork", MOV + EXIT, ())))


def test_an_entry_reads_back_as_it_was_kept():
    assert bpfcache.unpack("k", bpfcache.pack("k", program())) == program()


def test_an_entry_not_whole_or_not_this_keys_is_absent():
    data = bpfcache.pack("k", program())
    header_end = data.index(b"\n") + 1
    flipped = bytearray(data)
    flipped[-3] ^= 1  # an instruction's byte
    assert bpfcache.unpack("k", bytes(flipped)) is None
    assert bpfcache.unpack("k", data[:-8]) is None  # cut short
    assert bpfcache.unpack("other", data) is None  # another key's, under this name
    assert bpfcache.unpack("k", data[header_end:]) is None  # no header
    assert bpfcache.unpack("k", data.replace(b'"format": 1', b'"format": 0', 1)) is None
    assert bpfcache.unpack("k", b"") is None


def test_the_key_changes_with_everything_the_instructions_depend_on(monkeypatch):
    text, flags, lib = b"int x;", ["-DCP_NR_PROBES=3", "-DCP_FILTER_PID=1"], "0.26.0\nlibbcc"

    def key() -> str:
        return bpfcache.cache_key(text, flags, lib)

    base = key()
    assert key() == base and len(base) == 64
    keys = {base}
    text = b"int y;"
    keys.add(key())
    text, flags = b"int x;", ["-DCP_NR_PROBES=4", "-DCP_FILTER_PID=1"]
    keys.add(key())
    flags = ["-DCP_NR_PROBES=3"]  # a switch left out
    keys.add(key())
    flags, lib = ["-DCP_NR_PROBES=3", "-DCP_FILTER_PID=1"], "0.27.0\nlibbcc"
    keys.add(key())
    lib = "0.26.0\nlibbcc"
    monkeypatch.setattr(bpfcache, "kernel_identity", lambda: "6.19.0\n#1\nx86_64\nabcd")
    keys.add(key())
    monkeypatch.undo()
    monkeypatch.setattr(bpfcache, "__version__", "9.9.9")
    keys.add(key())
    monkeypatch.setattr(bpfcache, "FORMAT", bpfcache.FORMAT + 1)
    keys.add(key())
    assert len(keys) == 8


def test_the_kernels_build_id_is_read_from_its_notes():
    def note(name: bytes, kind: int, desc: bytes) -> bytes:
        padded = name + b"\0" * (-len(name) % 4)
        return struct.pack("<III", len(name), len(desc), kind) + padded + desc + b"\0" * (
            -len(desc) % 4)

    gnu = note(b"GNU\0", 3, bytes(range(20)))
    assert bpfcache.build_id(note(b"Linux\0", 6, b"6.1\0\0") + gnu) == bytes(range(20)).hex()
    assert bpfcache.build_id(note(b"Xen\0", 3, b"\1\2\3\4")) == ""  # kind 3 of another owner
    assert bpfcache.build_id(gnu[:20]) == ""
