"""Where a cudaprobe start and stop spends its time: runs `cudaprobe ARGS` in
this process with each step's function wrapped, and prints, at exit, the
milliseconds since the process started (from /proc/self/stat, to the clock
tick) at which each step began (>) and ended (<). The steps: the imports,
the plan, the program compiled (bcc.BPF) or loaded from the cache
(CachedBPF), the attach, the command's release, the detach, the drain, the
summary, the cleanup. Works on a tree before the cache too (CachedBPF is then
not stamped). BENCHMARKS.md, "Start", has a table made of its output.

    sudo PYTHONPATH=TREE python benchmarks/start_steps.py trace --force -o /tmp/t.jsonl -- /bin/true
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any

T0 = time.monotonic()


def _since_start_ms() -> float:
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        return (float(f.read().split()[0]) - started) * 1000


START_MS = _since_start_ms()
marks = [("python up (to the clock tick)", START_MS)]


def mark(name: str) -> None:
    marks.append((name, START_MS + (time.monotonic() - T0) * 1000))


def wrap(owner: Any, attr: str, name: str) -> None:
    real = getattr(owner, attr)

    def stamped(*args, **kwargs):
        mark(f"{name} >")
        try:
            return real(*args, **kwargs)
        finally:
            mark(f"{name} <")
    setattr(owner, attr, stamped)


def report() -> None:
    mark("exit")
    before = 0.0
    for name, at in marks:
        print(f"{at:8.1f} ms  (+{at - before:6.1f})  {name}", file=sys.stderr)
        before = at


def main() -> None:
    atexit.register(report)
    import cudaprobe.cli as cli  # noqa: PLC0415 - stamped: the imports are a step
    mark("cli imported")
    import cudaprobe.commands.trace  # noqa: F401, PLC0415
    mark("commands.trace imported")
    from cudaprobe.commands import options  # noqa: PLC0415
    from cudaprobe.probe import attach, load, ringbuf  # noqa: PLC0415
    from cudaprobe.sessions import probing, run, trace  # noqa: PLC0415
    from cudaprobe.targets import launch  # noqa: PLC0415

    wrap(probing, "plan_targets", "plan_targets")
    options.plan_targets = probing.plan_targets
    bcc = load.import_bcc()
    wrap(bcc.BPF, "__init__", "bcc.BPF() compiled")
    try:
        from cudaprobe.probe import cachedbpf  # noqa: PLC0415
        wrap(cachedbpf.CachedBPF, "__init__", "CachedBPF() loaded")
    except ImportError:
        pass
    wrap(bcc.BPF, "cleanup", "BPF.cleanup")
    for owner, attr, name in (
            (attach.Attacher, "attach_all", "attach_all"),
            (attach.Attacher, "add_target", "add_target"),
            (attach.Attacher, "start", "attacher.start"),
            (attach.Attacher, "detach", "detach"),
            (ringbuf.RingBuffer, "__init__", "RingBuffer()"),
            (ringbuf.RingBuffer, "drain", "drain"),
            (run.ProbeRun, "__enter__", "ProbeRun enter"),
            (run.ProbeRun, "finish", "run.finish"),
            (run.ProbeRun, "__exit__", "ProbeRun exit"),
            (launch.LaunchedCommand, "release", "command.release"),
            (trace.TraceSession, "_finish", "summary")):
        wrap(owner, attr, name)
    sys.argv = ["cudaprobe", *sys.argv[1:]]
    try:
        cli.main()
    except SystemExit:
        pass


if __name__ == "__main__":
    main()
