"""`-- COMMAND` held before exec, released or abandoned, and the exit status the
session lifecycle (sessions/run.py) gives for it; no root: nothing is attached."""

from __future__ import annotations

import os
import signal

from cudaprobe.sessions.run import command_exit_status
from cudaprobe.targets.launch import LaunchedCommand


def test_released_command_runs_and_its_status_is_returned():
    command = LaunchedCommand(["sh", "-c", "exit 7"])
    command.release()
    notes: list[str] = []
    assert command.wait(block=True) == 7
    assert command_exit_status(command, None, notes.append) == 7 and notes == []


def test_a_command_killed_by_a_signal_exits_128_plus_n():
    command = LaunchedCommand(["sh", "-c", "kill -TERM $$"])
    command.release()
    command.wait(block=True)
    assert command_exit_status(command, None, [].append) == 128 + signal.SIGTERM


def test_abandoned_command_never_runs(tmp_path):
    ran = tmp_path / "ran"
    command = LaunchedCommand(["touch", str(ran)])
    command.abandon()  # a stop signal while attaching
    notes: list[str] = []
    assert command_exit_status(command, signal.SIGINT, notes.append) == 130
    assert notes == ["stopped by SIGINT before touch was started: it did not run"]
    assert not ran.exists() and not command.released


def test_command_still_running_after_duration_is_left_running():
    command = LaunchedCommand(["sleep", "30"])
    command.release()
    notes: list[str] = []
    try:
        assert command_exit_status(command, None, notes.append) == 124
        assert notes == [f"--duration is over: sleep (pid {command.pid}) keeps running, "
                         "no longer traced"]
        assert command.wait() is None  # not killed
    finally:
        os.kill(command.pid, signal.SIGKILL)
        command.wait(block=True)


def _ignored_signals(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
               .split()[1], 16)


def test_command_gets_sigpipe_back_and_keeps_what_was_ignored(tmp_path):
    """The interpreter ignores SIGPIPE and SIGXFSZ: the command gets them at their
    default; SIGHUP ignored by whoever started cudaprobe (nohup) stays ignored."""
    out = tmp_path / "status"
    saved = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN  # as in cudaprobe
        command = LaunchedCommand(["sh", "-c", f"cat /proc/self/status > {out}"])
    finally:
        signal.signal(signal.SIGHUP, saved)
    command.release()
    assert command.wait(block=True) == 0
    assert _ignored_signals(out.read_text()) == 1 << (signal.SIGHUP - 1)
