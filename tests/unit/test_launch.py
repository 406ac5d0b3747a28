"""`-- COMMAND` held before exec, released or abandoned, and the exit status the
session lifecycle (sessions/run.py) gives for it; no root: nothing is attached."""

from __future__ import annotations

import os
import signal

from cudaprobe.sessions.run import end_of_trace
from cudaprobe.targets.launch import LaunchedCommand

from ..conftest import ignored_by_runner


def test_released_command_runs_and_its_status_is_returned():
    command = LaunchedCommand(["sh", "-c", "exit 7"])
    command.release()
    assert command.wait(block=True) == 7
    assert end_of_trace(command, None, False, [], False) == (7, "sh exited (status 7)")


def test_a_command_killed_by_a_signal_exits_128_plus_n():
    command = LaunchedCommand(["sh", "-c", "kill -TERM $$"])
    command.release()
    command.wait(block=True)
    assert end_of_trace(command, None, False, [], False)[0] == 128 + signal.SIGTERM


def test_abandoned_command_never_runs(tmp_path):
    ran = tmp_path / "ran"
    command = LaunchedCommand(["touch", str(ran)])
    command.abandon()  # a stop signal while attaching
    assert end_of_trace(command, signal.SIGINT, False, [], False) == (
        130, "stopped by SIGINT before touch was started: it did not run")
    assert not ran.exists() and not command.released


def test_command_still_running_after_duration_is_left_running():
    command = LaunchedCommand(["sleep", "30"])
    command.release()
    try:
        assert end_of_trace(command, None, True, [], False) == (
            124, f"--duration is over: sleep (pid {command.pid}) keeps running, "
                 "no longer traced")
        # its output failed: undecided until it exits
        assert end_of_trace(command, None, False, [], False) == (None, "")
        assert command.wait() is None  # not killed
    finally:
        os.kill(command.pid, signal.SIGKILL)
        command.wait(block=True)


def test_the_status_is_the_commands_only_when_its_exit_ended_the_trace():
    """A command that exited while its descendants ran on: its status once the
    last has exited, 124 or 128+N if --duration or a signal stopped the trace
    first; a stop signal that the command's exit follows within the grace
    (Ctrl-C at a terminal) gives its status; without a command, 0."""
    command = LaunchedCommand(["sh", "-c", "exit 3"])
    command.release()
    command.wait(block=True)
    assert end_of_trace(command, None, False, [], True) == (
        3, "sh exited (status 3), and the last of its descendants after it")
    assert end_of_trace(command, None, True, [41, 42], True) == (
        124, "--duration is over: sh has exited (status 3), 2 of its descendants keep "
             "running (pid 41, 42), no longer traced")
    assert end_of_trace(command, signal.SIGTERM, False, list(range(1, 8)), True) == (
        143, "stopped by SIGTERM: sh has exited (status 3), 7 of its descendants keep "
             "running (pid 1, 2, 3, 4, 5, ...), no longer traced")
    assert end_of_trace(command, signal.SIGINT, False, [], False) == (
        3, "stopped by SIGINT; sh exited too (status 3): its status is returned")
    assert end_of_trace(None, signal.SIGHUP, False, [], False) == (
        0, "stopped by SIGHUP: tracing stopped")
    assert end_of_trace(None, None, True, [], False) == (0, "--duration is over: tracing stopped")


def _ignored_signals(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
               .split()[1], 16)


def test_command_gets_sigpipe_back_and_keeps_what_was_ignored(tmp_path):
    """The interpreter ignores SIGPIPE and SIGXFSZ: the command gets them at their
    default; SIGHUP ignored by whoever started cudaprobe (nohup) stays ignored,
    and so does what the runner itself was started ignoring (a background job)."""
    out = tmp_path / "status"
    saved = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN  # as in cudaprobe
        command = LaunchedCommand(["sh", "-c", f"cat /proc/self/status > {out}"])
    finally:
        signal.signal(signal.SIGHUP, saved)
    command.release()
    assert command.wait(block=True) == 0
    assert _ignored_signals(out.read_text()) == ignored_by_runner() | 1 << (signal.SIGHUP - 1)


def test_stop_signals_are_counted_the_first_acted_on():
    """A second stop signal is counted (it cuts the drain short), never raised."""
    from cudaprobe.sessions.signals import StopRequest  # noqa: PLC0415

    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert (stop.signal, stop.last, stop.count) == (signal.SIGINT, signal.SIGTERM, 2)
