"""Starting `-- COMMAND` so that none of its calls are missed.

The child is forked first and held before exec until the probes are attached
and its pid is in the BPF filter map; then it is released. Nothing is run
through a shell.

The command starts in the state it would have had untraced: the Python
interpreter running cudaprobe ignores SIGPIPE and SIGXFSZ (so that writes
fail with EPIPE and EFBIG instead of killing it) and, in the C locale, sets
LC_CTYPE=C.UTF-8 in its environment (PEP 538). The child undoes both: those
two signals go back to their default action (what a shell gives a command;
cudaprobe cannot see whether they were ignored before the interpreter
started), signals cudaprobe catches go back to the default and signals
ignored when it started stay ignored (nohup), and the command gets the
environment cudaprobe was started with. Its signal mask, resource limits,
file descriptors and working directory are cudaprobe's, which tracing leaves
as they were (tests/integration/test_launch_state.py compares them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal

from cudaprobe.errors import CommandNotFound

# what the interpreter sets to SIG_IGN at startup, which a command started
# from a shell would find at SIG_DFL (subprocess's restore_signals does the same)
INTERPRETER_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


def _startup_environment() -> dict[bytes, bytes] | None:
    """The environment cudaprobe was exec'd with, before the interpreter changed
    os.environ (the kernel keeps the original block: /proc/self/environ)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except OSError:
        return None
    return dict(entry.partition(b"=")[::2] for entry in block.split(b"\0") if b"=" in entry)


STARTUP_ENVIRONMENT = _startup_environment()


def restore_signals() -> None:
    """In the child, before exec: what the interpreter ignores back to the default;
    handlers back to the default (exec would, but a signal may come before it);
    what was ignored when cudaprobe started stays ignored."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        handler = signal.getsignal(sig)
        if sig in INTERPRETER_IGNORED or callable(handler):
            signal.signal(sig, signal.SIG_DFL)


def resolve_command(argv: list[str]) -> str:
    """The executable `argv` would run (looked up in PATH as execvp does), or
    CommandNotFound: checked before anything is attached or written."""
    if not argv or not argv[0]:
        raise CommandNotFound("")
    exe = argv[0]
    found = shutil.which(exe) if os.sep not in exe else exe
    if not found or not os.path.exists(found):
        raise CommandNotFound(exe)
    if os.path.isdir(found):
        raise CommandNotFound(exe, "is a directory")
    if not os.access(found, os.X_OK):
        raise CommandNotFound(exe, "not executable")
    return found


def command_environment(extra: dict[str, str] | None = None) -> dict[bytes, bytes] | None:
    """The environment the command starts with: cudaprobe's own as it was
    started, plus `extra` (--gpu-time's library); None: os.environ as it is."""
    if not extra:
        return STARTUP_ENVIRONMENT
    env = dict(STARTUP_ENVIRONMENT if STARTUP_ENVIRONMENT is not None else os.environb)
    env.update({k.encode(): v.encode() for k, v in extra.items()})
    return env


class LaunchedCommand:
    def __init__(self, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        found = resolve_command(argv)
        env = command_environment(extra_env)
        exe = argv[0]
        self.argv = argv
        self.exit_status: int | None = None
        self.released = False  # whether it was let run
        read_end, self._release_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child: wait for the go, then exec
            try:
                os.close(self._release_fd)
                restore_signals()
                if os.read(read_end, 1) != b"g":
                    os._exit(126)  # cudaprobe gave up before releasing us
                os.close(read_end)
                if env is None:
                    os.execv(found, argv)
                os.execve(found, argv, env)
            except OSError as e:
                os.write(2, f"cudaprobe: cannot run {exe}: {e.strerror}\n".encode())
            finally:
                os._exit(127)
        os.close(read_end)
        # readable once it exits: a trace's wait wakes then (our child: its pid is
        # not reused while we have not waited for it); kept open for the session
        try:
            self.exit_fd: int | None = os.pidfd_open(self.pid)
        except (OSError, AttributeError):  # (Linux < 5.3)
            self.exit_fd = None

    def release(self) -> None:
        """Let the held child exec the command."""
        os.write(self._release_fd, b"g")
        os.close(self._release_fd)
        self._release_fd = -1
        self.released = True

    def abandon(self) -> None:
        """Never released (attach failed): the child exits without running anything."""
        if self._release_fd >= 0:
            os.close(self._release_fd)
            self._release_fd = -1
        self.wait(block=True)

    def wait(self, block: bool = False) -> int | None:
        """Exit status as a shell reports it (128+N for signal N), or None if running."""
        if self.exit_status is not None:
            return self.exit_status
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.exit_status = 0
            return 0
        if pid == 0:
            return None
        self.exit_status = os.waitstatus_to_exitcode(status)
        if self.exit_status < 0:
            self.exit_status = 128 - self.exit_status
        return self.exit_status

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._release_fd >= 0:
                os.close(self._release_fd)
