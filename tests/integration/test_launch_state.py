"""`-- COMMAND` starts in the state it would have had untraced: the same signal
dispositions, mask, limits and environment (targets/launch.py says what the
interpreter running cudaprobe changes, and how the child undoes it).

Both runs start from the same parent state, chosen to be unlike the defaults
(SIGHUP ignored as under nohup, SIGUSR1 blocked, a lower core-file limit, the
C locale that makes Python set LC_CTYPE), so that "restored" cannot pass by
setting everything to its default.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from ..conftest import HANG_S, cudaprobe_cmd, ignored_by_runner

# what a process sees of its own state; the shell adds the same to both runs
REPORT = (r"grep -E '^(Sig(Blk|Ign|Cgt)|NoNewPrivs|Seccomp|Cap(Inh|Prm|Eff|Bnd|Amb)):' "
          r"/proc/self/status; cat /proc/self/limits; umask; "
          r"for f in /proc/$$/fd/*; do echo ${f##*/} $(readlink $f | sed 's/:.*//'); done; "
          r"env | sort")


def _unusual_parent_state() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    resource.setrlimit(resource.RLIMIT_CORE, (4096, 8192))


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env["CUDAPROBE_TEST_MARKER"] = "kept as it was"
    return env


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S,
                          preexec_fn=_unusual_parent_state, env=_environment())


@pytest.mark.parametrize("command", ["trace", "stats"])
def test_command_state_traced_is_as_untraced(libcudart, tmp_path: Path, command):
    untraced = _run(["sh", "-c", REPORT])
    assert untraced.returncode == 0, untraced.stderr
    # SIGHUP, and what the runner was started ignoring (under nohup, in the background)
    assert f"SigIgn:\t{ignored_by_runner() | 1 << (signal.SIGHUP - 1):016x}" in untraced.stdout
    out = ["-o", str(tmp_path / "calls.jsonl")] if command == "trace" else []
    traced = _run(cudaprobe_cmd(command, "--lib", str(libcudart), *out, "--",
                                "sh", "-c", REPORT))
    assert traced.returncode == 0, traced.stderr
    # stats prints its table on stdout after the command's output
    assert traced.stdout.partition("cudaprobe stats:")[0] == untraced.stdout
    assert "LC_CTYPE" not in traced.stdout and "kept as it was" in traced.stdout
