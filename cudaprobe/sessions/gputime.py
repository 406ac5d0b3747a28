"""--gpu-time around a run of `-- COMMAND`: the library's environment for the
command before it starts, its records read once it has exited, and what
came of it said in one line each (none recorded, and why; dropped by CUPTI;
not joined to a traced call). For --pid and --comm, the library injected
into the running processes instead (sessions/gputime_attach.py): the same
records, read the same way.

CUPTI hands the records over in batches (the library asks for them each
FLUSH_PERIOD_MS of cupti/inject.h, and all at exit), so the GPU side of a
call is known only half a second or more after its row: `trace` and `stats` read them when the
command has exited (docs/gputime.md says why the rows of `trace --gpu-time`
wait for the end), `serve` polls them as they come. In a trace session
(GpuTimeRows) the rows are held until then, each launch, copy and memset
is given its `gpu` work (decode.gputime.join), and the rows go out in the
order they came.
"""

from __future__ import annotations

from typing import Callable

from cudaprobe.analysis.gpulines import LineJoin
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import GpuReader, GpuWork, join_work, say_shifts
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.errors import UsageError
from cudaprobe.output.forked import default_workers, held_rows_forked
from cudaprobe.output.formats import Reporter
from cudaprobe.sessions.gputime_attach import GpuTimeAttach, say_outcome
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


def gpu_time_for(notify: Callable[[str], None], command: list[str], keep: bool = True
                 ) -> GpuTimeRun | GpuTimeAttach:
    """--gpu-time: the library in the environment of `-- COMMAND`, or injected
    into the processes traced (--pid, --comm) once the probes are in
    (RunOptions.gpu_attach), and into each that joins later."""
    return GpuTimeRun(notify, keep) if command else GpuTimeAttach(notify, keep)


class GpuTimeRows:
    """--gpu-time in a trace session: the rows held (hold) until the command
    has exited and its GPU records are read, then joined to them and passed on
    (finish); or, where `on_gpu_work` takes the GPU work as it comes (serve),
    nothing held and the work handed on at each feed()."""

    def __init__(self, notify: Callable[[str], None],
                 on_gpu_work: Callable[[list[GpuWork]], None] | None,
                 command: list[str], lines: LineJoin | None = None) -> None:
        self.notify = notify
        self.on_gpu_work = on_gpu_work
        # serve only counts the GPU work: nothing kept, nothing joined but, with
        # `lines` (--py-stacks), each API record as it is read
        self.gpu = gpu_time_for(notify, command, keep=on_gpu_work is None)
        if lines is not None and self.gpu.reader is not None:
            self.gpu.reader.on_api = lines.api
            lines.cupti_clock = self.gpu.reader.cupti_clock
            lines.on_aligned = lambda pid, shift: say_shifts({pid: shift}, notify)
            if self.attach is not None:  # each launch's tie from CUPTI's callbacks alone
                self.attach.injector.call_ties = True
                self.gpu.reader.on_untied = lambda pid: notify(
                    f"--gpu-time: pid {pid}: its CUPTI refused callbacks on the calls that "
                    "launch, copy and set memory: its GPU work is counted, joined to no "
                    "Python line")
        elif on_gpu_work is not None and self.attach is not None and self.gpu.reader is not None:
            self.attach.injector.work_only = True  # kernels counted, none joined to a call
        self._held: list[Call] | None = None
        if self.gpu.reader is not None and on_gpu_work is None:
            self._held = []
            notify(f"--gpu-time: the rows are written when "
                   f"{'the command has exited' if command else 'tracing ends'} (its GPU "
                   "records come in batches)")

    @property
    def attach(self) -> GpuTimeAttach | None:
        """--pid/--comm: what injects the library into the processes traced."""
        return self.gpu if isinstance(self.gpu, GpuTimeAttach) else None

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

    def finish(self, reporter: Reporter, decoder: RecordDecoder) -> None:
        """The command has exited: its GPU work joined to the rows held, which go
        to `reporter`; or (serve) the last of the work, and what came of it, said."""
        if self._held is None:
            if self.on_gpu_work is not None:
                self.gpu.stop()  # attached: the recording stopped and flushed first
                self.feed()  # the last, written at the command's exit or the stop
                self.gpu.read()  # and what came of it, said
            return
        work = self.gpu.read()
        held, self._held = self._held, None
        if work:
            joined = join_work(held, work, self.gpu.reader.cupti_clock)
            say_shifts(joined.shifts, self.notify)
            kinds = {k: sum(1 for w in work if w.kind == k) for k in ("kernel", "memcpy", "memset")}
            self.notify(
                f"--gpu-time: {kinds['kernel']} kernels, {kinds['memcpy']} copies, "
                f"{kinds['memset']} memsets timed on the GPU"
                + (f"; {joined.unjoined} made by calls not traced" if joined.unjoined else "")
                + (f"; {joined.outside} made by calls before or after the traced window (the "
                   "recording spans the attach and the stop)" if joined.outside else ""))
        if held and not held_rows_forked(reporter, held, decoder, default_workers()):
            reporter.held_calls(held, decoder)

    def close(self) -> None:
        self.gpu.close()
