"""Where a communicator keeps its rank: read from libnccl's code
(targets/nccl_comm.py), checked against binutils' objdump, an independent
disassembler, on the real library of the wheel; and the reading of a
communicator from memory (decode/nccl.py's read_comm) on crafted bytes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from cudaprobe.decode.nccl import read_comm
from cudaprobe.targets.elfsyms import read_symbols
from cudaprobe.targets.nccl_comm import NCCL_MAGIC, CommLayout, comm_layout, loaded_and_stored


def objdump_offsets(path, name: str) -> set[int]:
    """The displacements of `mov DISP(%rX),%eY` followed within two instructions by
    `mov %eY,(%rZ)`, as objdump disassembles `name`."""
    table = read_symbols(str(path))
    start = table.vaddrs[name]
    size = table.sizes[table.starts.index(start)]
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                           f"--stop-address={start + size}", str(path)],
                          capture_output=True, text=True, check=True).stdout
    insns = [line.split("\t", 1)[1].strip() for line in text.splitlines() if "\t" in line]
    found = set()
    for i, insn in enumerate(insns):
        m = re.fullmatch(r"mov\s+(0x[0-9a-f]+)\(%r\w+\),(%e\w+|%r\d+d)", insn)
        if m is None:
            continue
        for later in insns[i + 1:i + 3]:
            if re.fullmatch(rf"mov\s+{re.escape(m.group(2))},\(%r\w+\)", later):
                found.add(int(m.group(1), 16))
    return found


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump not found")
def test_the_offsets_are_what_objdump_reads_in_the_library(libnccl):
    layout = comm_layout(str(libnccl))
    assert layout is not None
    assert objdump_offsets(libnccl, "ncclCommUserRank") == {layout.rank_offset}
    assert objdump_offsets(libnccl, "ncclCommCount") == {layout.nranks_offset}


def test_code_without_one_load_and_store_gives_no_layout():
    # mov 0x10(%rdi),%eax ; mov %eax,(%rsi)  and  mov 0x20(%rdi),%ecx ; mov %ecx,(%rdx)
    one, two = b"\x8b\x87\x10\x00\x00\x00\x89\x06", b"\x8b\x8f\x20\x00\x00\x00\x89\x0a"
    assert loaded_and_stored(one) == {0x10}
    assert loaded_and_stored(one + two) == {0x10, 0x20}
    # stored into another register's target: not this load's value
    assert loaded_and_stored(b"\x8b\x87\x10\x00\x00\x00\x89\x0e") == set()
    # r13 base and r14 target, as NCCL 2.28's own: mov 0x1044d0(%r13),%eax; xor; mov %eax,(%r14)
    assert loaded_and_stored(b"\x41\x8b\x85\xd0\x44\x10\x00\x31\xdb\x41\x89\x06") == {0x1044d0}
    assert comm_layout("/nonexistent/libnccl.so.2") is None


def test_a_communicator_is_read_only_where_it_starts_with_the_magic(tmp_path):
    layout = CommLayout(rank_offset=0x40, nranks_offset=0x44)

    def memory(magic: int, rank: int, nranks: int) -> int:
        data = bytearray(0x100)
        data[0:8] = magic.to_bytes(8, "little")
        data[0x40:0x44] = rank.to_bytes(4, "little", signed=True)
        data[0x44:0x48] = nranks.to_bytes(4, "little", signed=True)
        fd = os.memfd_create("comm")
        os.write(fd, bytes(data))
        return fd

    cases = [((NCCL_MAGIC, 3, 8), (3, 8)), ((NCCL_MAGIC, 0, 1), (0, 1)),
             ((0, 3, 8), None), ((NCCL_MAGIC, 8, 8), None), ((NCCL_MAGIC, -1, 8), None),
             ((NCCL_MAGIC, 0, 0), None)]
    for (magic, rank, nranks), want in cases:
        fd = memory(magic, rank, nranks)
        try:
            assert read_comm(fd, 0, layout) == want, (magic, rank, nranks)
            assert read_comm(fd, 0xF0, layout) is None  # past the end: nothing read
        finally:
            os.close(fd)
