"""What a traced process maps is its own to rename: it never steers what root
cudaprobe opens or where it puts a breakpoint.

The attacker runs as uid nobody: a cuda_loop that loads its libcudart from a
directory it owns. The victim is root's: a cuda_loop that runs a copy of the
runtime in a directory only root can read. The attacker re-points its
library's name at the victim's file (the file renamed away, a symlink in its
place) at each step of cudaprobe's attach, through swap_helper.py, which runs
the real code and does the swap there; the victim's code, as the victim's own
memory holds it, must stay byte for byte the file's, while the attacker's
calls are still traced. A FIFO in the library's place must not hold cudaprobe.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..conftest import HANG_S, NOBODY, REPO, as_not_root, unique_name
from . import swap_helper
from .running import Lines, Loop, build_loop, first_traced_iteration, read_jsonl, started

HELPER = Path(__file__).with_name("swap_helper.py")
PROBED = swap_helper.PROBED
STEPS = ("maps", "judged", "symbols", "attach")
INT3 = 0xCC


class Arena:
    """The attacker's directory (nobody's, in a world-searchable /tmp directory)
    and the victim's copy of the runtime (root's, in a directory of mode 0700)."""

    def __init__(self, tmp_path: Path, libcudart: Path) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="cp-hostile-", dir="/tmp"))
        self.base.chmod(0o755)
        home = self.base / "home"
        (home / "lib").mkdir(parents=True)
        self.lib = home / "lib" / "libcudart.so.13"
        shutil.copy(libcudart, self.lib)
        self.name = unique_name("hm")
        self.exe = home / self.name
        shutil.copy(build_loop("shared"), self.exe)
        for path in (home, home / "lib", self.lib, self.exe):
            os.chown(path, NOBODY, NOBODY)
        private = tmp_path / "victim"
        private.mkdir(mode=0o700)
        self.victim_lib = private / "libcudart.so.13"
        shutil.copy(libcudart, self.victim_lib)

    def attacker(self) -> Loop:
        return Loop(as_not_root([self.exe, "5"]),
                    env={**os.environ, "LD_LIBRARY_PATH": str(self.lib.parent)})

    def victim(self) -> Loop:
        return Loop([build_loop("shared"), "5"],
                    env={**os.environ, "LD_LIBRARY_PATH": str(self.victim_lib.parent)})

    def as_attacker(self, script: str) -> list[str]:
        """`script` as the attacker runs it: $1 its library's path, $2 the victim's."""
        return as_not_root(["sh", "-c", script, "sh", str(self.lib), str(self.victim_lib)])

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def arena(tmp_path, libcudart):
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv, to run the attacker as nobody")
    a = Arena(tmp_path, libcudart)
    yield a
    a.close()


def code_in_memory(pid: int, library: Path) -> dict[str, bytes]:
    """The first 16 bytes of each probed function of `library` as process `pid`
    runs them (its memory), then as the file holds them."""
    return {k: bytes.fromhex(a + b) for k, (a, b) in swap_helper.code_in_memory(
        pid, library).items()}


def unchanged(code: dict[str, bytes]) -> bool:
    return all(both[:16] == both[16:] and both[0] != INT3 for both in code.values())


@pytest.mark.parametrize("mode", ["comm", "perf"])
@pytest.mark.parametrize("step", STEPS)
def test_a_library_name_swapped_during_the_attach_never_reaches_another_file(
        arena, tmp_path, step, mode):
    """--comm (links: what every process of the name maps) and perf events
    (CUDAPROBE_ATTACH=perf: a probe for every process mapping the file): the
    breakpoints go into the very file the attacker maps, not the one its name
    means after the swap."""
    victim = arena.victim()
    victim.wait_iter(2)
    assert unchanged(code_in_memory(victim.pid, arena.victim_lib))
    attacker = arena.attacker()
    attacker.wait_iter(2)
    swap = arena.as_attacker('mv "$1" "$1.real" && ln -s "$2" "$1"')
    output = tmp_path / "calls.jsonl"
    who = ["--comm", arena.name] if mode == "comm" else ["--pid", str(attacker.pid)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if mode == "perf":
        env["CUDAPROBE_ATTACH"] = "perf"
    tracing = started(subprocess.Popen(
        [sys.executable, str(HELPER), step, json.dumps(swap), "--", "trace", "-o", str(output),
         "-e", ",".join(PROBED), *who], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, env=env))
    err = Lines(tracing.stderr)
    err.wait_for(lambda s: f"swapped at {step}" in s, "the swap")
    assert os.path.islink(arena.lib) and os.path.samefile(arena.lib, arena.victim_lib)
    # every probe of the start is in once cudaprobe says whom it follows
    err.wait_for(lambda s: "following every process named" in s or "attached to" in s,
                 "the attach")
    assert unchanged(code_in_memory(victim.pid, arena.victim_lib))
    # the attacker's own calls are traced: its probes went into its own file
    first = first_traced_iteration(output, attacker.pid)
    attacker.wait_iter(first + 3)
    victim.wait_iter(victim.iteration + 3)  # it ran its probed code meanwhile
    assert unchanged(code_in_memory(victim.pid, arena.victim_lib))
    last = attacker.stop()
    victim.stop()
    if mode == "comm":  # (with --pid the trace ends as its process exits: a SIGINT then
        tracing.send_signal(signal.SIGINT)  # could come during its drain, and stop it)
    assert tracing.wait(timeout=HANG_S) == 0, err.until_end()
    calls, _summary = read_jsonl(output)
    assert {c["pid"] for c in calls} == {attacker.pid}
    assert {c["event"] for c in calls} == set(PROBED)
    assert max(c["args"]["size"] - 4096 for c in calls if c["event"] == "cudaMalloc") == last


def test_a_fifo_at_a_mapped_library_path_does_not_hold_cudaprobe(arena, tmp_path):
    """Once cudaprobe has read the maps, the attacker renames its library away and
    puts a FIFO at the name the maps gave (nobody ever opens its other end).
    cudaprobe reads the mapped file, never the name: it neither waits on the
    FIFO nor is refused, and traces the attacker's calls."""
    attacker = arena.attacker()
    attacker.wait_iter(2)
    swap = arena.as_attacker('mv "$1" "$1.real" && mkfifo "$1"')
    output = tmp_path / "calls.jsonl"
    p = subprocess.run(
        [sys.executable, str(HELPER), "maps", json.dumps(swap), "--", "trace", "-o", str(output),
         "-e", ",".join(PROBED), "--pid", str(attacker.pid), "--duration", "1"],
        capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert "swapped at maps" in p.stderr
    assert Path(arena.lib).is_fifo()
    calls, _summary = read_jsonl(output)
    assert calls and {c["pid"] for c in calls} == {attacker.pid}
    attacker.stop()


def test_the_safe_point_probes_go_into_the_file_mapped(arena, tmp_path):
    """--gpu-time's safe-point probes (perf events: in every process mapping the
    file, for the few seconds of an attempt) after the name of the process's
    libcudart was re-pointed at the victim's: the victim's code is untouched
    while they are on."""
    victim = arena.victim()
    victim.wait_iter(2)
    attacker = arena.attacker()
    attacker.wait_iter(2)
    swap = arena.as_attacker('mv "$1" "$1.real" && ln -s "$2" "$1"')
    env = {**os.environ, "PYTHONPATH": str(REPO), "VICTIM_PID": str(victim.pid),
           "VICTIM_LIB": str(arena.victim_lib)}
    p = subprocess.run(
        [sys.executable, str(HELPER), "safepoint", json.dumps(swap), "--", "stats", "--pid",
         str(attacker.pid), "--gpu-time", "-e", ",".join(PROBED), "-d", "1"],
        capture_output=True, text=True, timeout=HANG_S, env=env)
    assert p.returncode == 0, p.stderr
    assert "swapped at safepoint" in p.stderr
    line = next(s for s in p.stderr.splitlines() if "victim code" in s)
    code = json.loads(line.split("victim code ", 1)[1].rsplit(" with ", 1)[0])
    assert int(line.rsplit(" with ", 1)[1].split()[0]) > 0  # the probes were on
    assert unchanged({k: bytes.fromhex(a + b) for k, (a, b) in code.items()}), code
    attacker.stop()
    victim.stop()
