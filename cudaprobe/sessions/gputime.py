"""--gpu-time around a run of `-- COMMAND`: the library's environment for the
command before it starts, its records read once it has exited, and what
came of it said in one line each (none recorded, and why; dropped by CUPTI;
not joined to a traced call).

CUPTI hands the records over in batches (each FLUSH_PERIOD_MS of
cupti/gputime.c, and all at exit), so the GPU side of a call is known only
half a second or more after its row: `trace` and `stats` read them when the
command has exited (docs/gputime.md says why the rows of `trace --gpu-time`
wait for the end), `serve` polls them as they come. In a trace session
(GpuTimeRows) the rows are held until then, each launch, copy and memset
is given its `gpu` work (decode.gputime.join), and the rows go out in the
order they came.
"""

from __future__ import annotations

from typing import Callable

from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import GpuReader, GpuWork, join
from cudaprobe.errors import UsageError
from cudaprobe.output.formats import Reporter
from cudaprobe.targets.cupti import GpuTimeSetup, prepare
from cudaprobe.targets.launch import STARTUP_ENVIRONMENT


def check_gpu_time(command: list[str]) -> None:
    if not command:
        raise UsageError("--gpu-time goes with -- COMMAND (the GPU-time library is loaded "
                         "when the command starts; docs/gputime.md says why not --pid)")


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
        if not self.reader.seen:
            why = "; ".join(sorted(set(self.reader.statuses.values())))
            if not why:
                why = ("no kernel, copy or memset ran on a GPU" if self.reader.files else
                       "the library wrote nothing (CUDA's driver was never initialised, "
                       "or the command ran as a user that cannot write its directory)")
            self.notify(f"--gpu-time: no GPU activity was recorded: {why}")
        if self.reader.dropped:
            self.notify(f"--gpu-time: CUPTI dropped {self.reader.dropped} activity records "
                        "(its buffers were full)")
        if self.reader.foreign_tids and self.reader.seen:
            self.notify(f"--gpu-time: in {self.reader.foreign_tids} processes CUPTI could not "
                        "give the kernel's thread ids: their GPU work is not joined to rows")
        if self.reader.all_api_records and self.reader.seen:
            self.notify(f"--gpu-time: in {self.reader.all_api_records} processes CUPTI recorded "
                        "every CUDA call, not only launches and copies (its libcupti lacks "
                        "cuptiActivityEnableRuntimeApi): it cost the program more")
        if self.reader.bad_files:
            self.notify(f"--gpu-time: {self.reader.bad_files} GPU-time files were unreadable")
        return self.reader.work

    def close(self) -> None:
        self.setup.close()


class GpuTimeRows:
    """--gpu-time in a trace session: the rows held (hold) until the command
    has exited and its GPU records are read, then joined to them and passed on
    (finish); or, where `on_gpu_work` takes the GPU work as it comes (serve),
    nothing held and the work handed on at each feed()."""

    def __init__(self, notify: Callable[[str], None],
                 on_gpu_work: Callable[[list[GpuWork]], None] | None) -> None:
        self.notify = notify
        self.on_gpu_work = on_gpu_work
        # serve only counts the GPU work: nothing kept, nothing joined
        self.gpu = GpuTimeRun(notify, keep=on_gpu_work is None)
        self._held: list[Call] | None = None
        if self.gpu.reader is not None and on_gpu_work is None:
            self._held = []
            notify("--gpu-time: the rows are written when the command has exited (its GPU "
                   "records come in batches)")

    @property
    def env(self) -> dict[str, str]:
        return self.gpu.env

    @property
    def holding(self) -> bool:
        return self._held is not None

    def hold(self, calls: list[Call]) -> None:
        self._held.extend(calls)

    def feed(self) -> bool:
        """serve: the GPU work written since the last look, to be counted."""
        if self.on_gpu_work is None:
            return False
        self.on_gpu_work(self.gpu.poll())
        return True

    def finish(self, reporter: Reporter) -> None:
        """The command has exited: its GPU work joined to the rows held, which go
        to `reporter`; or (serve) the last of the work, and what came of it, said."""
        if self._held is None:
            if self.feed():  # the last, written at the command's exit
                self.gpu.read()  # and what came of it, said
            return
        work = self.gpu.read()
        held, self._held = self._held, None
        if work:
            unjoined = join(held, work)
            kinds = {k: sum(1 for w in work if w.kind == k) for k in ("kernel", "memcpy", "memset")}
            self.notify(
                f"--gpu-time: {kinds['kernel']} kernels, {kinds['memcpy']} copies, "
                f"{kinds['memset']} memsets timed on the GPU"
                + (f"; {unjoined} made by calls not traced" if unjoined else ""))
        if held:
            reporter.calls(held)

    def close(self) -> None:
        self.gpu.close()
