"""Leaving nothing behind in the kernel, and not making the user wait for it.

uprobe_events entries: bcc creates a uprobe through tracefs only where the
kernel has no perf uprobe PMU (Linux < 4.17), naming it `<event>_bcc_<pid>`,
and removes it at detach. A bcc tool that was killed leaves its entries
behind; those of dead pids are removed when tracing starts. The entry is
removed by appending `-:group/event` to uprobe_events: opening that file with
O_TRUNC would remove every uprobe on the machine, so it is never done.

Perf-event probes (the CUDAPROBE_ATTACH=perf fallback): the kernel waits for
an RCU grace period as each is closed, under one global mutex, so 116 probes
take 12 s to close one at a time or in parallel. A detached child process
takes the descriptors over and closes them; cudaprobe closes its own copies,
which costs nothing while the child holds them, and exits at once. Until the
child is done the probes still fire, with nobody reading what they record.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterable

# bcc's own choice (libbpf.c): debugfs's tracing directory where it exists
TRACEFS_DIRS = ("/sys/kernel/debug/tracing", "/sys/kernel/tracing")
_BCC_EVENT = re.compile(r"^[pr]:(?P<name>\S+/\S+_bcc_(?P<pid>\d+))(\s|$)")
CLOSER_NAME = "cudaprobe-close"
CLOSE_THREADS = 32  # probes closed at once (close_together)
OURS = "cudaprobe/"  # the group of cudaprobe's own entries (forkhold.py's)


def uprobe_events_path() -> str | None:
    for d in TRACEFS_DIRS:
        path = os.path.join(d, "uprobe_events")
        if os.path.isfile(path):
            return path
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def bcc_events(text: str) -> list[tuple[str, int]]:
    """(group/event, pid of the bcc process that made it) for each bcc entry."""
    out = []
    for line in text.splitlines():
        m = _BCC_EVENT.match(line)
        if m:
            out.append((m.group("name"), int(m.group("pid"))))
    return out


def append_uprobe_event(path: str, line: str) -> None:
    """One command to uprobe_events (`p:...` adds, `-:...` removes), appended:
    no truncation, no seek (tracefs refuses it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def remove_uprobe_events(path: str, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """Remove entries by name; returns (removed, kept: busy or refused). An
    entry already gone (another cudaprobe starting at the same time removed
    it) is in neither."""
    removed, kept = [], []
    for name in names:
        try:
            append_uprobe_event(path, f"-:{name}")
        except FileNotFoundError:
            continue
        except OSError:
            kept.append(name)  # EBUSY: still enabled, so not stale after all
        else:
            removed.append(name)
    return removed, kept


def remove_stale_uprobe_events() -> str | None:
    """Remove uprobe_events entries left by bcc processes that no longer exist;
    returns a note for the user when there were any."""
    path = uprobe_events_path()
    if path is None:
        return None
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    stale = [name for name, pid in bcc_events(text) if not pid_alive(pid)]
    if not stale:
        return None
    removed, kept = remove_uprobe_events(path, stale)
    # a fork hold's probe still in use: its cudaprobe is ending (the perf events on it
    # close after its threads), and its gate's keeper removes it then
    kept = [name for name in kept if not name.startswith(OURS)]
    if not removed and not kept:
        return None
    note = f"removed {len(removed)} uprobe_events entries left by crashed bcc tools"
    if kept:
        note += f"; {len(kept)} could not be removed (still in use?): {', '.join(kept[:3])}"
    return note


def close_together(fds: Iterable[int]) -> None:
    """Close `fds` at once, each group on a thread of its own: as the last
    reference to a probe goes, the kernel waits for a grace period (~50 ms a
    uprobe_multi link, ~150 ms a perf event with a program, on the 2-core
    machine), and closed together those waits overlap, where one after
    another they add up."""
    def close(group: list[int]) -> None:
        for fd in group:
            with contextlib.suppress(OSError):
                os.close(fd)
    fds = list(fds)
    if len(fds) < 2:
        close(fds)
        return
    n = min(CLOSE_THREADS, len(fds))
    threads = [threading.Thread(target=close, args=(fds[i::n],), name="cudaprobe-close",
                                daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def close_in_background(fds: list[int], perf_uprobes: bool = False) -> bool:
    """Close `fds`: ours at once, the last references (the slow part) in a
    detached process, which then, where they are `perf_uprobes`, removes any
    uprobe_events entries bcc made for this process. False (nothing closed)
    when no process could be started."""
    owner = os.getpid() if perf_uprobes else 0
    go_read, go_write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(go_read)
        os.close(go_write)
        return False
    if pid == 0:
        try:
            os.setsid()  # out of the terminal's process group: Ctrl-C does not reach it
            if os.fork() == 0:
                _close_all(fds, owner, go_read)
        finally:
            os._exit(0)
    os.close(go_read)
    os.waitpid(pid, 0)
    for fd in fds:
        os.close(fd)
    os.close(go_write)  # now the closer holds the last references
    return True


def _close_all(fds: list[int], owner: int, go: int) -> None:
    """In the detached grandchild: keep nothing else open (a pipe held here
    would keep the reader of cudaprobe's output waiting), wait until the owner
    has closed its copies, then close the probes; then the uprobe_events
    entries bcc made for `owner` (0: none to look for)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(CLOSER_NAME)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    keep = {*fds, go}
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    with contextlib.suppress(OSError):
        os.read(go, 1)  # EOF once the owner closed its end, or died
    close_together(fds)
    path = uprobe_events_path() if owner else None
    ours: list[str] = []
    if path:
        with contextlib.suppress(OSError), open(path) as f:
            ours = [name for name, pid in bcc_events(f.read()) if pid == owner]
        if ours:
            remove_uprobe_events(path, ours)
