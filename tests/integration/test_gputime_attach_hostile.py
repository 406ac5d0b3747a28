"""--pid --gpu-time against processes that do what a hostile or merely
unusual program may (tests/workloads/inject_hostile.c), cudaprobe as root:
a forged "already loaded" library answering with a descriptor of a file its
user cannot open (the attacker runs as nobody); a why full of terminal
escapes; a CUDA thread with a seccomp filter of its own; and what an attempt
leaves in a plain program: nothing when no thread was caught, and exactly
what docs/gputime.md lists when CUPTI refused."""

from __future__ import annotations

import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cudaprobe.output.text import escape
from cudaprobe.targets.cupti import build_library, find_libcupti
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import HANG_S, NOBODY, as_not_root
from .conftest import build_cuda_workload
from .test_gputime_attach import Target, helper, libc_code_end

pytestmark = pytest.mark.slow

IN_ACCESS, IN_MODIFY, IN_OPEN = 0x1, 0x2, 0x20
IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x8, 0x10
RAN_UNTOUCHED = ("cuda ok\n", 0)


@pytest.fixture(scope="module")
def hostile_exe(libcuda) -> Path:
    return build_cuda_workload("inject_hostile.c", libcuda)


@pytest.fixture(scope="module")
def library() -> tuple[str, int]:
    """The memfd name cudaprobe's library has once loaded, and where in it its
    attach function lies: what a forger needs."""
    built, why = build_library()
    if built is None:
        pytest.skip(why)
    return f"cudaprobe-{built.stem}", read_symbols(str(built)).vaddrs["gputime_inject_attach"]


def no_gpu_time(said: list[str], pid: int) -> str:
    (line,) = said
    prefix = f"no GPU time for pid {pid}: "
    assert line.startswith(prefix), line
    return line[len(prefix):]


class Watch:
    """inotify on one file: every open, read, write or close of it by anyone."""

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        mask = IN_ACCESS | IN_MODIFY | IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
        assert self.fd >= 0 and self.libc.inotify_add_watch(self.fd, bytes(path), mask) >= 0

    def events(self) -> list[int]:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        masks, at = [], 0
        while at < len(data):
            _, mask, _, size = struct.unpack_from("iIII", data, at)
            masks.append(mask)
            at += 16 + size
        return masks


def test_a_forged_descriptor_is_not_opened(hostile_exe, library, fake_cupti):
    """The attacker (nobody) maps a memfd named as cudaprobe's loaded library,
    whose attach function answers "recording" into an O_PATH descriptor of a
    root-only file: cudaprobe takes that descriptor as it is (pidfd_getfd),
    finds no memfd, and never opens the file."""
    where = Path(tempfile.mkdtemp(prefix="cudaprobe-victim-", dir="/tmp"))
    try:
        where.chmod(0o711)  # nobody may name the file, not open it
        victim = where / "root-only"
        victim.write_bytes(b"root's own\n")
        victim.chmod(0o600)
        name, vaddr = library
        t = Target(as_not_root([str(hostile_exe), "forge", name, str(vaddr), str(victim)]))
        try:
            assert Path(f"/proc/{t.pid}/status").read_text().count(f"\t{NOBODY}\t") >= 1
            watch = Watch(victim)
            (cycle,) = helper(t.pid, 1, None, fake_cupti)
            assert watch.events() == []  # not opened, not written, not closed after writing
            assert victim.read_bytes() == b"root's own\n"
            assert no_gpu_time(cycle["said"], t.pid) == (
                "the descriptor its GPU-time library gave for its records is refused: "
                "not a memfd")
        finally:
            assert t.finish() == RAN_UNTOUCHED
    finally:
        for p in where.iterdir():
            p.unlink()
        where.rmdir()


def test_the_process_words_are_escaped_and_quoted(hostile_exe, library, fake_cupti):
    """The why a refusing library gives is the process's text: a clear-screen,
    a window title and a bell come out as visible escapes, in quotes."""
    name, vaddr = library
    t = Target(as_not_root([str(hostile_exe), "refuse", name, str(vaddr)]))
    try:
        (cycle,) = helper(t.pid, 1, None, fake_cupti)
        line = no_gpu_time(cycle["said"], t.pid)
        # as every notice is shown (output/notices.py): escaped once, in quotes
        assert escape(line) == ('the GPU-time library in it said: "\\x1b[2J\\x1b]0;pwned'
                                '\\x07 the screen was cleared\\x1b[31m"')
        assert not re.search(r"[\x00-\x1f\x7f-\x9f]", escape(line))
    finally:
        assert t.finish() == RAN_UNTOUCHED


def test_a_thread_with_a_seccomp_filter_of_its_own_is_not_chosen(hostile_exe, fake_cupti):
    """The only CUDA thread put memfd_create under SECCOMP_RET_KILL_PROCESS for
    itself alone (the main thread's Seccomp is 0): the stub run there would
    kill the process. stats goes on without GPU time and says why."""
    t = Target([str(hostile_exe), "seccomp"])
    try:
        assert "Seccomp:\t0" in Path(f"/proc/{t.pid}/status").read_text()
        env = {**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)}
        p = subprocess.run([sys.executable, "-m", "cudaprobe", "stats", "--pid", str(t.pid),
                            "--gpu-time", "-e", "cudaGetDeviceCount", "-d", "1"],
                           capture_output=True, text=True, timeout=HANG_S, env=env)
        assert p.returncode == 0, p.stderr
        assert (f"no GPU time for pid {t.pid}: its threads that make CUDA calls run under a "
                "seccomp filter, which the injected code's system calls (memfd_create, "
                "tgkill, mmap) could trip: it runs on untouched") in p.stderr
        t.wait_settled()
        assert t.loaded() == 0
    finally:
        assert t.finish() == RAN_UNTOUCHED


def test_nothing_is_written_when_no_thread_is_caught(hostile_exe, fake_cupti):
    """No thread makes a CUDA call: after the attempt, not a byte of the
    process's memory map or of libc's last code page has changed."""
    t = Target([str(hostile_exe), "idle"])
    try:
        maps, page = t.maps(), libc_code_end(t.pid)
        (cycle,) = helper(t.pid, 1, None, fake_cupti)
        assert no_gpu_time(cycle["said"], t.pid).startswith(
            "no thread of it entered a CUDA call within 5 s")
        assert libc_code_end(t.pid) == page
        assert t.maps() == maps
    finally:
        assert t.finish() == RAN_UNTOUCHED


def mapped(maps: str) -> set[str]:
    return {line.split(maxsplit=5)[5] for line in maps.splitlines() if len(line.split()) > 5}


def anonymous(maps: str) -> set[str]:
    return {line.split()[0] for line in maps.splitlines() if len(line.split()) == 5}


ARENA = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's reservation


def malloc_arena(ranges: set[str]) -> set[str]:
    """Of `ranges` ("start-end", hex), the parts of one malloc arena: ranges that
    tile one 64 MiB-aligned, 64 MiB-long reservation (none: an empty set)."""
    spans = sorted((*(int(x, 16) for x in r.split("-")), r) for r in ranges)
    for i, (start, _end, _text) in enumerate(spans):
        if start % ARENA:
            continue
        at, parts = start, []
        for lo, hi, text in spans[i:]:
            if lo != at:
                break
            parts.append(text)
            at = hi
            if at - start == ARENA:
                return set(parts)
    return set()


def test_what_stays_after_cupti_refused(hostile_exe, library):
    """The real libcupti, without a GPU, refuses: what stays is docs/gputime.md's
    list, no more: the library's memfd, libcupti and what it needs, and the
    stub's bytes at the end of libc's code (the rest of that page as it was)."""
    t = Target([str(hostile_exe), "plain"])
    try:
        before, (line, page) = t.maps(), libc_code_end(t.pid)
        (cycle,) = helper(t.pid, 1, None, None)
        said = no_gpu_time(cycle["said"], t.pid)
        assert "CUPTI" in said or "libcupti" in said, said
        t.wait_settled()
        after = t.maps()
        # named: the library's memfd, libcupti, what libcupti needs that was not
        # mapped, and the kernel's page for uprobes (every traced process's)
        needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(
            ["readelf", "-d", str(find_libcupti())], capture_output=True, text=True).stdout)
        had = {Path(p).name for p in mapped(before)}
        want = {f"memfd:{library[0]} (deleted)", find_libcupti().name, "[uprobes]",
                *(n for n in needed if n not in had)}
        assert {Path(p).name for p in mapped(after) - mapped(before)} == want - had
        # anonymous: those loaded libraries' zero-filled data, each right after one
        # of their mappings; and, where the chosen thread had not allocated before,
        # the malloc arena glibc then gives it (docs/gputime.md): a 64 MiB reservation
        # on a 64 MiB boundary, its used head and the rest
        ends = {line.split()[0].split("-")[1] for line in after.splitlines()
                if Path(line.split(maxsplit=5)[-1]).name in want}
        grown = anonymous(after) - anonymous(before)
        arena = malloc_arena(grown)
        assert grown and all(r.split("-")[0] in ends for r in grown - arena), (grown, after)
        same_line, changed = libc_code_end(t.pid)
        assert same_line == line
        differ = [i for i in range(4096) if changed[i] != page[i]]
        assert differ and differ[-1] - differ[0] < 512
    finally:
        assert t.finish() == RAN_UNTOUCHED

