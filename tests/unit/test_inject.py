"""The injection's pieces that need no process: the frame and control-block
layout read from cupti/inject.h (one source for the C, the assembly and
targets/inject.py), and the stub as cudaprobe copies it out of the built
library: position-independent, so its bytes there are the assembler's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from cudaprobe.output.text import escape
from cudaprobe.sessions.gputime_control import CONTROL_MAGIC, quoted
from cudaprobe.targets import cupti
from cudaprobe.targets.inject import SLOT_REGISTERS, ProcessMemory, read_layout, stub_code
from cudaprobe.targets.pidfd import HeldProcess, memfd_mismatch

SRC = cupti.cupti_source_dir()


def test_layout_of_the_frame():
    L = read_layout(SRC / "inject.h")
    # the registers the stub restores, in the slots run_stub fills
    for i, name in enumerate(SLOT_REGISTERS):
        key = "R_RFLAGS" if name == "eflags" else f"R_{name.upper()}"
        assert L[key] == i * 8, key
    sizes = {"F_MEMFD_NAME": 64, "F_PATH": 64, "F_SYMBOL": 32, "F_TEXT": 256, "F_FXSAVE": 512}
    fields = sorted((v, sizes.get(k, 8), k) for k, v in L.items()
                    if k.startswith(("R_", "F_")))
    for (off, size, name), (nxt, _, other) in zip(fields, fields[1:]):
        assert off + size <= nxt, f"{name} overlaps {other}"
    last_off, last_size, _ = fields[-1]
    assert last_off + last_size <= L["FRAME_SIZE"]
    assert L["F_FXSAVE"] % 16 == 0 and L["FRAME_ALIGN"] % 16 == 0  # fxsave64's alignment
    assert L["STUB_POP"] >= 128 + 8  # the frame lies past the red zone


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_stub_copied_out_is_the_assembled_code(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPROBE_CACHE", str(tmp_path))
    built, why = cupti.build_library()
    if built is None:
        pytest.skip(why)
    obj, raw = tmp_path / "stub.o", tmp_path / "stub.bin"
    subprocess.run(["cc", "-c", "-o", obj, SRC / "inject_stub.S", f"-I{SRC}"], check=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", obj, raw], check=True)
    code = stub_code(built)
    assert code == raw.read_bytes()[:len(code)] and len(code) > 100
    assert code[:4] == bytes.fromhex("480fae84")  # fxsave64 off rsp: its first instruction


def test_control_magic_is_inject_h_s():
    text = (SRC / "inject.h").read_text()
    (magic,) = re.findall(r'^#define CONTROL_MAGIC "(\w+)"', text, re.M)
    assert CONTROL_MAGIC == magic.encode().ljust(8, b"\0")


def test_the_process_words_quoted_bounded_and_escaped_once_where_shown():
    said = quoted(b'no GPU\x1b[2J\x07\n\xff' + b"x" * 1000)
    assert escape(said) == '"no GPU\\x1b[2J\\x07\\n\ufffd' + "x" * 243 + '"'


def test_only_an_unsealed_writable_memfd_of_its_name_passes():
    name = "/memfd:cudaprobe-check (deleted)"
    fd = os.memfd_create("cudaprobe-check", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    unsealable = os.memfd_create("cudaprobe-check", os.MFD_CLOEXEC)
    path = os.open("/etc/hostname", os.O_PATH | os.O_CLOEXEC)
    plain = os.open("/etc/hostname", os.O_RDONLY | os.O_CLOEXEC)
    try:
        assert memfd_mismatch(fd, name, 0) == ""
        assert memfd_mismatch(fd, "/memfd:other (deleted)", 0) == "a memfd of another name"
        assert memfd_mismatch(unsealable, name, 0) == "a sealed memfd"  # F_SEAL_SEAL
        assert memfd_mismatch(path, name, 0) == "not a memfd"
        assert memfd_mismatch(plain, name, 0) == "not a memfd"
        os.write(fd, b"x")
        assert memfd_mismatch(fd, name, 0) == "a memfd of 1 bytes (at most 0 expected)"
    finally:
        for d in (fd, unsealable, path, plain):
            os.close(d)


def test_a_process_gone_before_its_memory_is_opened():
    """Checked by pid, then gone (a zombie: its pid not yet free, soon anyone's):
    its /proc/PID/mem is not taken as that process's memory."""
    p = subprocess.Popen(["sleep", "600"])
    try:
        process = HeldProcess(p.pid)
        assert process.alive()
        ProcessMemory(process).close()
        p.kill()
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        assert not process.alive()
        with pytest.raises(ProcessLookupError):
            ProcessMemory(process)
        process.close()
    finally:
        p.kill()
        p.wait()
