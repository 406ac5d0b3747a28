"""The kernel's comm as text (probe/event.py comm_text): UTF-8, bytes that are
not written `\\xNN`, a character the kernel's 15-byte cut left incomplete dropped."""

from __future__ import annotations

import pytest

from cudaprobe.probe.event import comm_text


@pytest.mark.parametrize(("comm", "text"), [
    ("ab日本語".encode(), "ab日本語"),
    ("ab日本語日本語".encode()[:15], "ab日本語日"),  # cut by the kernel in 本
    (b"abcdefghijklm\xc3", "abcdefghijklm\\xc3"),  # 14 bytes: the process's own, kept
    (b"abcdefghijklmn\xc3", "abcdefghijklmn"),  # 15: the kernel's cut
    (b"abcdefghijklmn\xff", "abcdefghijklmn\\xff"),  # never a character's start: kept
    (b"a\xffb", "a\\xffb"),
    (b"\x1b[2J", "\x1b[2J"),  # control characters: text, escaped where shown (escape())
])
def test_comm_text(comm: bytes, text: str) -> None:
    assert comm_text(comm + b"\0" * (32 - len(comm))) == text
    text.encode("utf-8")  # valid everywhere: no lone surrogate
