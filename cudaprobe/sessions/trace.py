"""A trace session: attach, stream decoded calls to a reporter, stop, summarize.

The lifecycle is run.py's ProbeRun (stop conditions, the command's grace
period, teardown, exit status); this module is what trace and serve do in it:
decode each poll's records for the reporter, say losses as they grow, sweep
the calls of threads gone, and, once detached and drained, report the calls
still in flight and the summary. With --gpu-time the rows are held until
the command has exited, or tracing ends (sessions/gputime.py's GpuTimeRows).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from cudaprobe import STARTED
from cudaprobe.analysis.gpulines import LineJoin
from cudaprobe.analysis.summary import Summary, count_lost
from cudaprobe.catalogue.functions import NCCL, RUNTIME
from cudaprobe.decode.calls import Call, Symbolizer, decode_event
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.decode.nccl import GROUP_STEPS
from cudaprobe.decode.nesting import CallOrder, Mark
from cudaprobe.decode.pystacks import PyStacks
from cudaprobe.decode.records import RecordDecoder
from cudaprobe.output.files import OutputStream
from cudaprobe.output.forked import ForkedRows, default_workers
from cudaprobe.output.formats import Reporter
from cudaprobe.output.status import StatusLine
from cudaprobe.output.summary_view import describe_lost, render_summary
from cudaprobe.probe.bpfprog import Settings
from cudaprobe.probe.event import R_CALLER, R_DURATION, R_FUNC_ID, R_RET, R_TID, R_TS, RawEvent
from cudaprobe.probe.plan import ProbePlan
from cudaprobe.probe.ringbuf import Strided
from cudaprobe.probe.sweep import Sweeper
from cudaprobe.probe.tracer import Tracer
from cudaprobe.sessions.gputime import GpuTimeRows
from cudaprobe.sessions.run import POLL_MS, ProbeRun, RunOptions, say_if_no_cuda

LOSS_REPORT_S = 1.0
# a drain longer than this says how far it is on the status line (the
# environment's CUDAPROBE_DRAIN_SAY_S, a number of seconds, overrides it)
DRAIN_SAY_S = 1.0


def drain_say_s() -> float:
    try:
        return max(0.0, float(os.environ.get("CUDAPROBE_DRAIN_SAY_S", DRAIN_SAY_S)))
    except ValueError:
        return DRAIN_SAY_S


@dataclass
class SessionOptions(RunOptions):
    symbolize: Symbolizer | None = None
    # called with each event's pid before it is decoded: a symbolizer that reads
    # /proc/PID/maps wants to see the process while it still runs
    see_process: Callable[[int], None] | None = None
    # given the loss counters (tracer's and decode_errors), cumulative, each second
    on_counters: Callable[[dict[str, int]], None] | None = None
    # the stream the reporter writes to, whose failure stops the trace
    output: OutputStream | None = None
    # GPU time of the command's launches and copies (CUPTI): rows held until its exit,
    # unless on_gpu_work takes the GPU work as it comes (serve), rows going out as usual
    gpu_time: bool = False
    on_gpu_work: Callable[[list[GpuWork]], None] | None = None
    # serve --py-stacks: joins each API record, as read, to the launch that made it
    gpu_lines: LineJoin | None = None
    # --gpu-time into running processes: told of each the library records in, and
    # of each it could not go into, with why (serve: counted)
    on_gpu_recording: Callable[[int], None] | None = None
    on_gpu_refused: Callable[[int, str], None] | None = None
    # the live line on the terminal while rows go to a file or pipe
    status: StatusLine | None = None


class TraceSession:
    def __init__(self, plan: ProbePlan, settings: Settings, reporter: Reporter,
                 summary_console: Console | None, options: SessionOptions) -> None:
        self.plan = plan
        self.settings = settings
        self.reporter = reporter
        # where the human summary goes when the reporter itself does not show it
        self.summary_console = summary_console
        self.options = options
        self.summary = Summary(libraries=sorted({a.path for a in plan.attachments}),
                               not_found=plan.not_found)
        self._in_flight_errors = 0
        self._records: RecordDecoder | None = None  # made once t0 is known
        # the rows in call order, each under the call it was made in
        self.order = CallOrder([p.function.api in (RUNTIME, NCCL) for p in plan.probes],
                               groups=[GROUP_STEPS.get(p.function.name, 0)
                                       for p in plan.probes])
        self.kernel_handles = KernelHandles()  # driver launches' kernel names, as made
        self.sweeper = Sweeper()
        self._t0 = 0
        self._lost_said = 0
        self._lost_total = 0  # as last counted (each second)
        self._next_loss_check = 0.0
        self._header_lines = 0  # written by reporter.start(): not rows
        self._gpu: GpuTimeRows | None = None
        self._lifecycle: ProbeRun | None = None
        self._undecoded = 0  # records the drain left when a second stop signal cut it
        self._forked: ForkedRows | None = None  # rows made by forked children (a backlog)

    @property
    def decode_errors(self) -> int:
        return self._in_flight_errors + (self._records.errors if self._records else 0)

    def _in_flight(self, raws: list[RawEvent]) -> list[Call]:
        calls = []
        for raw in raws:
            if self.options.see_process is not None:
                self.options.see_process(raw.pid)
            try:
                calls.append(decode_event(raw, self.plan.probes, self._t0,
                                          self.options.symbolize, in_flight=True,
                                          handles=self.kernel_handles))
            except ValueError:
                self._in_flight_errors += 1
        return calls

    def _emit(self, records: list[tuple] | Strided) -> None:
        """A poll's records (none: the poll found nothing, and calls held
        long enough go out all the same); a batch still bytes (Strided) goes to
        the forked children as it is where CallOrder would give it back as it
        is, else is unpacked here."""
        if type(records) is Strided:
            fids = records.column(R_FUNC_ID)
            if (self._forked is not None
                    and self.order.as_they_come(set(fids), any(records.column(R_CALLER)))
                    and self._forked.take_strided(records, fids)):
                self._records.count_columns(fids, records.column(R_RET),
                                            records.column(R_DURATION), self.summary)
                return
            records = records.tuples()
        if records:
            self._records.count(records, self.summary)  # until the kernel counts them
        self._pass_on(*self.order.add(records))

    def _pass_on(self, ordered: list[tuple], nesting: list[Mark]) -> None:
        """Records in call order, to the reporter, or held (--gpu-time)."""
        if not ordered:
            return
        if self._gpu is not None and self._gpu.holding:  # until the GPU's records are read
            self._gpu.hold(self._records.calls(ordered, nesting))
        elif self._forked is None or not self._forked.take(ordered, nesting):
            self.reporter.records(ordered, self._records, nesting)

    def run(self) -> int:
        """Trace until stopped; returns the exit status for cudaprobe."""
        if self.options.gpu_time:
            self._gpu = GpuTimeRows(self.options.notify, self.options.on_gpu_work,
                                    self.options.command, self.options.gpu_lines)
            self.options.command_env = {**self.options.command_env, **self._gpu.env}
            self.options.gpu_attach = attach = self._gpu.attach
            if attach is not None:
                attach.on_recording = self.options.on_gpu_recording
                attach.on_refused = self.options.on_gpu_refused
        try:
            return self._run()
        finally:
            if self.options.status is not None:  # taken away before anything else is said
                self.options.status.stop()
            if self._gpu is not None:
                self._gpu.close()

    def _run(self) -> int:
        with ProbeRun(self.plan, self.settings, self.options, self.summary,
                      on_attached=self._attached) as run:
            tracer = run.tracer
            status = self.options.status
            if status is not None:
                status.start()
            while run.running() and not self._output_failed(tracer):
                self._read(tracer, POLL_MS)
                self._say_losses(tracer)
                self.sweeper.due(tracer.pairing)
                if status is not None:
                    status.update(run.elapsed_s, self.summary.total_rows, self._lost_total)
            run.finish(lambda timeout_ms: self._read(tracer, timeout_ms))
            if status is not None:
                status.stop()
            if run.command is not None and not run.command.released:
                self._never_ran()
                return run.exit_status()
            self._finish(tracer, run.traced_s)
            self._say_py_stacks()
            output = self.options.output
            if output is None or output.failed is None:
                return run.exit_status()
            note = output.failure_note(self.summary.lost)
            if note is not None:
                self.options.notify(note)
            output.failure_said()
            run.wait_untraced()  # -- COMMAND runs on: its status is still returned
        return run.exit_status() if run.command is not None else int(note is not None)

    def _output_failed(self, tracer: Tracer) -> bool:
        """Rows written out each poll; after a failure the probes come off at once,
        but not for a header alone: they stay in until rows were given, so that
        the calls made by then are counted as lost, not as never made."""
        output = self.options.output
        if output is None:
            return False
        if self._forked is not None:
            self._forked.poll()
        output.hand_over()  # written out meanwhile; a failure is known once its batch is done
        if output.failure is None or output.lines <= self._header_lines:
            return False
        tracer.attacher.detach()
        return True

    def _say_py_stacks(self) -> None:
        """--py-stacks: the calls whose stack could not be read (never shown wrong),
        by why, as their rows say."""
        stacks = self._records.py_stacks if self._records else None
        if stacks is not None and stacks.borrowed:
            self.options.notify(f"--py-stacks: {stacks.borrowed} calls of threads with no Python "
                                f"frame carry the stack of a Python thread waiting for them "
                                f"(py_stack_borrowed)")
        for why, calls in (stacks.missing.items() if stacks is not None else ()):
            self.options.notify(f"--py-stacks: {calls} calls without their Python stack: {why}")
        if stacks is not None and stacks.forward:
            self.options.notify(f"--py-stacks: {stacks.forward} calls of PyTorch's backward "
                                f"pass carry the stack of the forward op they differentiate "
                                f"(py_stack_forward)")
        for why, calls in (stacks.no_forward.items() if stacks is not None else ()):
            self.options.notify(f"--py-stacks: {calls} calls of PyTorch's backward pass without "
                                f"their forward op's stack: {why}")

    def _never_ran(self) -> None:
        """Stopped before -- COMMAND was started: leave an existing -o file as it was."""
        if self.options.output is not None:
            self.options.output.discard()

    def _seeing(self, tracer: Tracer) -> Callable[[int], None] | None:
        """What hears of each process at its first event: see_process, and, on a
        node (no --pid, --comm or command: each process is found by its calls),
        --py-stacks' interpreter finder (Tracer.see_python_on_node: its calls
        from then on carry their stacks) and --gpu-time's library, which goes
        into each process found (GpuTimeAttach.found)."""
        see = self.options.see_process
        if self.options.targets is not None or self.options.command:
            return see
        hears = [f for f in (see, tracer.see_python_on_node if tracer.py is not None else None,
                             self._gpu.attach.found if self._gpu is not None
                             and self._gpu.attach is not None else None) if f is not None]
        if len(hears) <= 1:
            return hears[0] if hears else None

        def each(pid: int) -> None:
            for hear in hears:
                hear(pid)
        return each

    def _attached(self, run: ProbeRun) -> None:
        """The probes are in and the command not yet run: ready decoder and reporter."""
        self._t0 = run.t0_ns
        self._lifecycle = run
        self._records = RecordDecoder(self.plan.probes, self._t0, self.options.symbolize,
                                      self.kernel_handles, self._seeing(run.tracer))
        if run.tracer.py is not None:  # --py-stacks: each call's stack joined as it is decoded
            self._records.py_stacks = PyStacks(run.tracer.py.layouts)
            run.tracer.ring.on_side = self._records.py_stacks.add
        self.summary.attach_s = run.tracer.attacher.attach_seconds
        self.summary.startup_s = time.monotonic() - STARTED
        self.summary.bpf_program = run.tracer.program_from
        self.reporter.start()
        if self.options.output is not None:
            self._header_lines = self.options.output.lines
        workers = default_workers()
        if workers and self._gpu is None and ForkedRows.usable(self.reporter,
                                                               self.reporter.stream):
            self._forked = ForkedRows(self.reporter, self._records, self.reporter.stream,
                                      workers)
            # a launch loop's batches go to the children still bytes: the thread
            # reads a few of their fields, the children unpack them
            run.tracer.ring.keep_strided = self._records.py_stacks is None

    def _read(self, tracer: Tracer, timeout_ms: int) -> None:
        """One poll's records; with no timeout (detached), all that is left, a batch
        at a time: the spool's backlog can be long."""
        if timeout_ms:
            self._emit(tracer.ring.poll(timeout_ms))
            return
        run = self._lifecycle
        status, due, calls = self.options.status, time.monotonic() + drain_say_s(), None
        while True:
            if status is not None and time.monotonic() >= due:
                if calls is None:  # all counted now: the probes are off
                    calls = 0 if self.settings.errors_only else sum(
                        t.calls for t in tracer.maps.read_tally().values())
                status.draining(self.summary.total_rows, calls)
            if run.drain_cut or not (records := tracer.ring.drain()):
                break
            self._emit(records)
        if status is not None and calls is not None:
            status.draining(self.summary.total_rows, calls)  # where it ended
        if run.drain_cut:  # a second stop signal: the rest is counted, not decoded
            self._undecoded = tracer.ring.skip_rest()
            run.say_drain_cut(self._undecoded)

    def _say_losses(self, tracer: Tracer) -> None:
        """The live status line: on stderr, at most each second, when more was lost;
        serve --gpu-time's GPU work read at the same pace."""
        now = time.monotonic()
        if now < self._next_loss_check:
            return
        self._next_loss_check = now + LOSS_REPORT_S
        if self._gpu is not None:
            self._gpu.feed()
        lost = {**tracer.counters(), "decode_errors": self.decode_errors}
        if self.options.on_counters is not None:
            self.options.on_counters(lost)
        total = self._lost_total = count_lost(lost)
        if total > self._lost_said:
            self._lost_said = total
            self.options.notify(f"{total} events lost so far ({describe_lost(lost)})")

    def _report_last(self, in_flight: list[Call]) -> None:
        """The calls CallOrder still holds, and those still running: a call still
        running (the outermost of its thread) encloses the calls its thread
        made since it began, so it comes first and they come under it. To the
        reporter, or to the rows held for --gpu-time."""
        if self._forked is not None:
            self._forked.drain()  # every row before them written
        held, nesting = self.order.flush()
        outer: dict[int, Call] = {}
        for c in in_flight:
            top = outer.setdefault(c.tid, c)
            if top is not c:
                c.depth, c.parent = 1, top.ts_ns
        for i, rec in enumerate(held):
            top = outer.get(rec[R_TID])
            if top is not None and rec[R_TS] >= top.ts_ns:
                depth, parent = nesting[i]
                nesting[i] = (depth + 1, top.ts_ns if parent is None else parent)
        if in_flight:
            if self._gpu is not None and self._gpu.holding:
                self._gpu.hold(in_flight)
            else:
                self.reporter.calls(in_flight)
        self._pass_on(held, nesting)
        if self._forked is not None:
            self._forked.drain()

    def _finish(self, tracer: Tracer, duration_s: float) -> None:
        """Detached and drained: the calls still in flight, then the summary."""
        self.sweeper.now(tracer.pairing)  # calls of threads gone are not "still running"
        self.summary.exited_mid_call = self.sweeper.removed
        in_flight = self._in_flight(tracer.pairing.in_flight())
        in_flight.sort(key=lambda c: c.ts_ns)
        self.summary.in_flight = in_flight
        self._report_last(in_flight)
        if self._gpu is not None:
            self._gpu.finish(self.reporter, self._records)
        # calls, errors and latency as the kernel counted them: exact when rows were lost
        self.summary.take_kernel_counts(self.plan.probes, tracer.maps.read_tally())
        lost = tracer.counters()
        lost["decode_errors"] = self.decode_errors
        if self._undecoded:
            lost["undecoded"] = self._undecoded
        output = self.options.output
        if output is not None:
            output.flush()
            if output.failed is not None and output.lines_out == 0:
                # nothing went out: every row is lost, however many lines a format
                # gives a call (Chrome's metadata events)
                lost[output.cause] = sum(s.calls for s in self.summary.by_event.values())
            elif output.failed is not None:
                lost[output.cause] = output.rows_dropped(self._header_lines)
                output.retry()  # the trailer may fit where rows did not
        self.summary.lost = lost
        self.summary.duration_s = duration_s
        self.kernel_handles.close()
        if self._lifecycle is not None:
            self._lifecycle.say_end()  # after the rows, before the summary
        self.reporter.finish(self.summary)
        if self.summary_console is not None:
            render_summary(self.summary, self.summary_console)
        if output is None or output.failed is None:  # else tracing stopped early, said so
            say_if_no_cuda(self.options, self.summary.total_calls + len(in_flight))

