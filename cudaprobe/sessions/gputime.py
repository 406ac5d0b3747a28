"""--gpu-time around a run of `-- COMMAND`: the library's environment for the
command before it starts, its records read once it has exited, and what
came of it said in one line each (none recorded, and why; dropped by CUPTI;
not joined to a traced call).

CUPTI hands the records over in batches (each FLUSH_PERIOD_MS of
cupti/gputime.c, and all at exit), so the GPU side of a call is known only
half a second or more after its row: `trace` and `stats` read them when the
command has exited (docs/gputime.md says why the rows of `trace --gpu-time`
wait for the end), `serve` polls them as they come.
"""

from __future__ import annotations

from typing import Callable

from cudaprobe.decode.gputime import GpuReader, GpuWork
from cudaprobe.errors import UsageError
from cudaprobe.targets.cupti import GpuTimeSetup, prepare
from cudaprobe.targets.launch import STARTUP_ENVIRONMENT


def check_gpu_time(command: list[str], pids: tuple[int, ...] = (), comm: str | None = None
                   ) -> None:
    if not command and not pids and comm is None:
        raise UsageError("--gpu-time goes with -- COMMAND, --pid or --comm")


class GpuTimeRun:
    def __init__(self, notify: Callable[[str], None], keep: bool = True) -> None:
        self.notify = notify
        self.setup: GpuTimeSetup = prepare(STARTUP_ENVIRONMENT)
        if self.setup.why:
            notify(f"no GPU time: {self.setup.why}")
        self.reader = GpuReader(self.setup.directory, keep) if self.setup.directory else None

    @property
    def env(self) -> dict[str, str]:
        return self.setup.env

    @property
    def dropped(self) -> int:
        return self.reader.dropped if self.reader is not None else 0

    def poll(self) -> list[GpuWork]:
        """What the command's processes wrote since the last poll (serve: live)."""
        return self.reader.poll() if self.reader is not None else []

    def read(self) -> list[GpuWork]:
        """Every record the command's processes wrote; the lines that say what came of it."""
        if self.reader is None:
            return []
        self.reader.poll()
        return say_outcome(self.reader, self.notify,
                           "the library wrote nothing (CUDA's driver was never initialised, "
                           "or the command ran as a user that cannot write its directory)")

    def stop(self) -> None:
        """Nothing to stop: the library flushes at the command's exit."""

    def close(self) -> None:
        self.setup.close()


def say_outcome(reader: GpuReader, notify: Callable[[str], None], nothing: str
                ) -> list[GpuWork]:
    """What came of the GPU time, in a line each; the work read. `nothing`: why,
    when no process of it wrote a file."""
    if not reader.seen:
        why = "; ".join(sorted(set(reader.statuses.values())))
        if not why:
            why = "no kernel, copy or memset ran on a GPU" if reader.files else nothing
        notify(f"--gpu-time: no GPU activity was recorded: {why}")
    if reader.dropped:
        notify(f"--gpu-time: CUPTI dropped {reader.dropped} activity records "
               "(its buffers were full)")
    if reader.foreign_tids and reader.seen:
        notify(f"--gpu-time: in {reader.foreign_tids} processes CUPTI could not "
               "give the kernel's thread ids: their GPU work is not joined to rows")
    if reader.all_api_records and reader.seen:
        notify(f"--gpu-time: in {reader.all_api_records} processes CUPTI recorded "
               "every CUDA call, not only launches and copies (its libcupti lacks "
               "cuptiActivityEnableRuntimeApi): it cost the program more")
    if reader.bad_files:
        notify(f"--gpu-time: {reader.bad_files} GPU-time files were unreadable")
    return reader.work
