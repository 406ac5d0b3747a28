"""Chrome Trace Event JSON (ui.perfetto.dev, chrome://tracing), streamed.

The JSON array format, one event per line, written as calls come and never
held in memory: a file cut short (cudaprobe killed) still opens, since the
closing `]` is optional in that format. Per call one complete event ("X") on
the track of its pid/tid, with the decoded arguments, result and DETAILS as
args; a call still running at the end is a begin event ("B") that never
ends. A launch whose kernel is known is named by the kernel, in the table's
short form (namespace, name, template head; see decode.demangle.shorten),
with the whole name in args.func_name and the API call in args.call, so that
the timeline reads as kernels rather than as a row of cudaLaunchKernel.
Process and thread names are metadata ("M") events, written the first
time a pid or tid is seen. The summary is the last event: a global instant
("i", "s": "g") named "cudaprobe summary" (the array format has no room for
`otherData`).

Runtime -> driver flows: calls come in call order with their depth
(decode.nesting.CallOrder), so the driver calls a runtime call made follow
it at depth 1, with its ts_ns as their parent. The latest call at depth 0 of
each thread is kept (MAX_THREADS threads), and each driver call made in a
runtime call gets a flow from it ("s" inside the runtime call, "f" just
before the driver call, binding to the next slice).
Timestamps are µs since the probes were attached, at ns precision.

--gpu-time: each device is a process ("GPU 0", pid GPU_PID_BASE + device)
and each stream a thread of it ("stream 7"); a call's kernels, copies and
memsets are slices there, on the same CLOCK_MONOTONIC timeline, each with a
flow (category LAUNCH_FLOW_CATEGORY) from the call that queued it.
"""

from __future__ import annotations

import json
from itertools import islice, repeat
from operator import add
from typing import Any, Callable

from cudaprobe.analysis.summary import Summary
from cudaprobe.catalogue.functions import DRIVER, RUNTIME, ArgKind
from cudaprobe.decode.calls import Call
from cudaprobe.decode.demangle import demangle, shorten
from cudaprobe.decode.handles import NAME_KEY
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.ranks import NO_RANK, Ranks
from cudaprobe.decode.records import TOP, ProbeDecoder, RecordDecoder, RowMaker
from cudaprobe.decode.schema import time_ms
from cudaprobe.output.base import Reporter
from cudaprobe.output.recordtext import MEMO_MAX, compile_args_text
from cudaprobe.probe.event import (
    R_COMM,
    R_DURATION,
    R_FUNC_ID,
    R_PID,
    R_RET,
    R_TID,
    R_TS,
    comm_text,
)
from cudaprobe.probe.ringbuf import Strided

# the devices' "processes" of --gpu-time: past any pid, pid_max being at most 2^22
GPU_PID_BASE = 1 << 30
MAX_THREADS = 4096  # threads whose latest top-level call is kept; the oldest forgotten
SUMMARY_EVENT = "cudaprobe summary"
FLOW_CATEGORY = "runtime_to_driver"
LAUNCH_FLOW_CATEGORY = "launch_to_gpu"
# keys the reporter adds next to the decoded arguments (tests check no argument has one)
RESULT_KEYS = ("ret", "ret_name", "details", "in_flight", "call")
MISSING = object()  # a process not named yet (its rank may be None)

# ASCII: a name's "…" (and any other non-ASCII character) escaped; text of one
# width throughout is several times faster to join and write
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True,
                           check_circular=False).encode


def _us(ns: int) -> float:
    return ns / 1000


class ChromeReporter(Reporter):
    name = "chrome"
    # `.json` alone is the JSON document; these double extensions are matched first
    extensions = (".chrome.json", ".perfetto.json")

    def start(self) -> None:
        self._sep = ""
        # events written after the first: each after a line break (",\n"), the only
        # ones its JSON holds (records() gives the count with its rows)
        self._breaks = 0
        self._origin: int | None = None  # CLOCK_MONOTONIC ns at attach, from the first call
        self._processes: dict[int, int | None] = {}  # pid -> the rank its name says
        self._threads: set[tuple[int, int]] = set()
        # tid -> (start ns, event, api) of its latest call at depth 0
        self._tops: dict[int, tuple[int, str, str]] = {}
        self._next_flow = 1
        self._last_ns = 0
        # a probe -> what makes its slices from its records (_probe_slices)
        self._probe_parts: dict[Any, tuple] = {}
        self._comms: dict[bytes, str] = {}  # the kernel's comm -> its text
        self.stream.write("[\n")

    def _emit(self, out: list[str], event: dict[str, Any]) -> None:
        out.append(self._sep + _encode(event))
        self._breaks += self._sep != ""
        self._sep = ",\n"

    def calls(self, calls: list[Call]) -> None:
        out: list[str] = []
        for c in calls:
            self._call(out, c)
        if out:
            self.stream.write("".join(out))

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        """Straight from the records, no Call made (row_maker), but where each
        call's Python stack goes into its slice (--py-stacks): as Calls."""
        if decoder.py_stacks is not None:
            super().records(records, decoder, nesting)
            return
        breaks = self._breaks
        text = "".join(decoder.decode(records, self, nesting))
        if text:  # its line breaks, counted as its events were made
            self.write_lines(text, self._breaks - breaks)

    def rows_data(self, records: list[tuple], decoder: RecordDecoder,
                  nesting: list[Mark] | None) -> tuple[bytes, int, int]:
        """The batch's events as bytes, their line breaks, no flag (output.forked)."""
        breaks = self._breaks
        text = "".join(decoder.decode(records, self, nesting))
        return text.encode(), self._breaks - breaks, 0

    def forked_rows(self, data: bytes, lines: int, flags: int) -> None:
        """Events made by a forked child (rows_data's): written as they are."""
        self.stream.write_data(data, lines)

    def state(self) -> tuple:
        return (self._origin, self._sep, self._breaks, dict(self._processes),
                set(self._threads), dict(self._tops), self._next_flow, self._last_ns)

    def restore(self, state: object) -> None:
        # the row makers hold these containers: changed in place
        (self._origin, self._sep, self._breaks, processes, threads, tops, self._next_flow,
         self._last_ns) = state
        self._processes.clear()
        self._processes.update(processes)
        self._threads.clear()
        self._threads.update(threads)
        self._tops.clear()
        self._tops.update(tops)

    def advance(self, records: list[tuple | Strided], decoder: RecordDecoder,
                nesting: list[Mark] | None) -> None:
        """As row_maker's rows of these records leave the reporter (their tracks
        named, the events counted, each thread's latest top-level call, the flows
        numbered, the last time), no text made: tests/unit/test_forked_rows.py
        checks the rows of children made from each state, byte for byte. A
        batch still bytes is read a column at a time (each of its calls at the
        top: output.forked takes no other)."""
        if not records:
            return
        if self._origin is None:
            first = records[0]
            ts = (first.one(0) if type(first) is Strided else first)[R_TS]
            self._origin = ts - round(time_ms(ts, decoder.t0_ns) * 1e6)
        events = flows = 0
        done = 0  # records before this run of tuples, each one mark of `nesting`
        run: list[tuple] = []
        for r in records:
            if type(r) is not Strided:
                run.append(r)
                continue
            if run:
                e, f = self._advance_tuples(run, decoder, nesting, done)
                events, flows, done, run = events + e, flows + f, done + len(run), []
            e = self._advance_strided(r, decoder)
            if e is None:  # more threads than are kept: call by call
                e, _ = self._advance_tuples(r.tuples(), decoder, None, 0)
            events, done = events + e, done + len(r)
        if run:
            e, f = self._advance_tuples(run, decoder, nesting, done)
            events, flows = events + e, flows + f
        events += 2 * flows
        self._next_flow += flows
        self._breaks += events - (self._sep == "")
        self._sep = ",\n"

    def _advance_tuples(self, records: list[tuple], decoder: RecordDecoder,
                        nesting: list[Mark] | None, first: int) -> tuple[int, int]:
        """advance() of records as tuples, `nesting[first:]` theirs: (events, flows)."""
        origin, last, known = self._origin, self._last_ns, decoder.ranks.known
        processes, threads, tops = self._processes, self._threads, self._tops
        probes: dict[int, tuple[str, str]] = {}
        events = flows = 0
        marks = repeat(TOP) if nesting is None else islice(nesting, first, None)
        for rec, (depth, parent) in zip(records, marks):
            pid, tid = rec[R_PID], rec[R_TID]
            rank = known.get(pid, NO_RANK)[0] if known else None
            if processes.get(pid, MISSING) != rank:
                processes[pid] = rank
                events += 1
            if (pid, tid) not in threads:
                threads.add((pid, tid))
                events += 1
            events += 1
            end = rec[R_TS] - origin + rec[R_DURATION]
            if end > last:
                last = end
            if depth > 1:
                continue
            fid = rec[R_FUNC_ID]
            probe = probes.get(fid)
            if probe is None:
                d = decoder.decoder(fid)
                probe = probes[fid] = (d.event, d.api)
            if depth == 0:
                if tid not in tops and len(tops) >= MAX_THREADS:
                    del tops[next(iter(tops))]
                tops[tid] = (rec[R_TS], probe[0], probe[1])
            elif probe[1] == DRIVER:
                top = tops.get(tid)
                if top is not None and top[0] == parent and top[2] == RUNTIME:
                    flows += 1
        self._last_ns = last
        return events, flows

    def _advance_strided(self, batch: Strided, decoder: RecordDecoder) -> int | None:
        """_advance_tuples() of a batch still bytes, every call at the top, from its
        columns: its events; None where its new threads would push others out
        of those kept (the tuples' path then keeps the order they go in)."""
        pids, tids = batch.column(R_PID), batch.column(R_TID)
        tops = self._tops
        latest = dict(zip(tids, range(len(tids))))  # each thread's last call, in order
        if len(tops) + len(latest.keys() - tops.keys()) > MAX_THREADS:
            return None
        known, processes, threads = decoder.ranks.known, self._processes, self._threads
        events = len(tids)
        for pid in dict.fromkeys(pids):
            rank = known.get(pid, NO_RANK)[0] if known else None
            if processes.get(pid, MISSING) != rank:
                processes[pid] = rank
                events += 1
        new = set(zip(pids, tids)) - threads
        threads |= new
        events += len(new)
        ts, fids = batch.column(R_TS), batch.column(R_FUNC_ID)
        end = max(map(add, ts, batch.column(R_DURATION))) - self._origin
        if end > self._last_ns:
            self._last_ns = end
        probes: dict[int, tuple[str, str]] = {}
        for tid, i in latest.items():
            fid = fids[i]
            probe = probes.get(fid)
            if probe is None:
                d = decoder.decoder(fid)
                probe = probes[fid] = (d.event, d.api)
            tops[tid] = (ts[i], probe[0], probe[1])
        return events

    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        """The probe's record -> the text calls() writes of its Call (its track's
        names where new, the slice, a runtime -> driver flow), byte for byte
        (tests/unit/test_decoders.py checks)."""
        parts_of, cat = self._probe_slices(probe)
        name_of, api = probe.event, probe.api
        known, comms = ranks.known, self._comms
        processes, threads = self._processes, self._threads

        tops = self._tops
        # (slice parts, pid, tid) -> the slice's text before its "ts" and after its
        # "dur": what a row's slice has besides its two times, made once a thread
        ends: dict[tuple, tuple[str, str]] = {}

        def make(rec: tuple, depth: int = 0, parent: int | None = None) -> str:
            ts, pid, tid, duration = rec[R_TS], rec[R_PID], rec[R_TID], rec[R_DURATION]
            origin = self._origin
            if origin is None:
                origin = self._origin = ts - round(time_ms(ts, t0_ns) * 1e6)
            rank = known.get(pid, NO_RANK)[0] if known else None
            parts = parts_of(rec)
            key = (parts, pid, tid)
            end = ends.get(key)
            head = ""
            if end is None or processes.get(pid, MISSING) != rank:
                if processes.get(pid, MISSING) != rank or (pid, tid) not in threads:
                    process = comms.get(rec[R_COMM])
                    if process is None:
                        process = comms[rec[R_COMM]] = comm_text(rec[R_COMM])
                    names: list[str] = []
                    self._name_track(names, pid, tid, process, rank)
                    head = "".join(names)
                if end is None:
                    if len(ends) >= MEMO_MAX:
                        ends.clear()
                    end = ends[key] = (f'{{"name":{parts[0]},"cat":{cat},"ph":"X","ts":',
                                       f',"pid":{pid},"tid":{tid},"args":{parts[1]}}}')
            at = ts - origin
            if at + duration > self._last_ns:
                self._last_ns = at + duration
            sep = self._sep  # (as _slice_text writes the slice)
            text = f'{head}{sep}{end[0]}{at / 1000!r},"dur":{duration / 1000!r}{end[1]}'
            if sep:
                self._breaks += 1
            else:
                self._sep = ",\n"
            if depth == 0:  # (as _top keeps it)
                if tid not in tops and len(tops) >= MAX_THREADS:
                    del tops[next(iter(tops))]
                tops[tid] = (ts, name_of, api)
            elif depth == 1 and api == DRIVER:
                out = [text]
                self._flow(out, pid, tid, ts, name_of, parent)
                return "".join(out)
            return text
        return make

    def _probe_slices(self, probe: ProbeDecoder) -> tuple[Callable[[tuple], tuple[str, str]],
                                                          str]:
        """(the probe's record -> its slice's name and args object as JSON, its
        category as JSON), made once a probe. The parts are remembered by what
        they are made of (the argument text, DETAILS, the result, the kernel's
        name: each remembered already), a trace repeating a few."""
        found = self._probe_parts.get(probe)
        if found is not None:
            return found
        json_details = compile_args_text(probe)[1]
        # the launch's kernel: by a host stub (FUNC) or a driver handle (CU_FUNCTION)
        kernel = next(((f.index, probe.names.texts if f.kind is ArgKind.FUNC
                        else probe.names.handle_texts) for f in probe.fields
                       if f.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION)), None)
        if probe.category != "kernel":
            kernel = None
        event = _encode(probe.event)
        ret_names, ret_name = probe.ret_names, probe.ret_name
        slices: dict[tuple, tuple[str, str]] = {}

        def made(key: tuple) -> tuple[str, str]:
            args_text, details, ret, texts = key
            name, args = event, [args_text[1:-1]] if len(args_text) > 2 else []
            if texts and texts[0]:  # named: its short name, the call's under "call"
                name = _encode(texts[1][1:])
                args.append('"call":' + event)
            args.append(f'"ret":{ret},"ret_name":'
                        f'{_encode(ret_names.get(ret) or ret_name(ret))},'
                        f'"details":{_encode(details)}')
            if len(slices) >= MEMO_MAX:
                slices.clear()
            parts = slices[key] = (name, "{" + ",".join(args) + "}")
            return parts

        def parts_of(rec: tuple) -> tuple[str, str]:
            args_text, details = json_details(rec)
            texts = kernel[1](rec, rec[kernel[0]]) if kernel is not None else None
            key = (args_text, details, rec[R_RET], texts)
            return slices.get(key) or made(key)

        found = self._probe_parts[probe] = (parts_of,
                                            _encode(f"{probe.api},{probe.category}"))
        return found

    def _slice_text(self, parts: tuple[str, str], cat: str, ts_ns: int, duration: int,
                    pid: int, tid: int) -> str:
        """A call's complete event ("X"), its name and args object given."""
        at = ts_ns - self._origin
        if at + duration > self._last_ns:
            self._last_ns = at + duration
        return (f'{{"name":{parts[0]},"cat":{cat},"ph":"X","ts":{_us(at)!r},'
                f'"dur":{_us(duration)!r},"pid":{pid},"tid":{tid},"args":{parts[1]}}}')

    def row_of_call(self, call: Call) -> str:
        out: list[str] = []
        self._call(out, call)
        return "".join(out)

    def _call(self, out: list[str], c: Call) -> None:
        """A call's events: its track's names where new, its slice, its GPU work,
        the runtime -> driver flow into it."""
        if self._origin is None:
            # time_ms is ms since attach to the µs: the origin to within 0.5 µs
            self._origin = c.ts_ns - round(c.time_ms * 1e6)
        if self._processes.get(c.pid, MISSING) != c.rank or (c.pid, c.tid) not in self._threads:
            self._name_track(out, c.pid, c.tid, c.process, c.rank)
        text = self._record_slice(c)
        if text is None:
            self._emit(out, self._slice(c))
        else:
            out.append(self._sep + text)
            self._breaks += self._sep != ""
            self._sep = ",\n"
        if c.gpu is not None:
            self._gpu_slices(out, c)
        if c.depth == 0:
            self._top(c.tid, c.ts_ns, c.event, c.api)
        elif c.depth == 1 and c.api == DRIVER:
            self._flow(out, c.pid, c.tid, c.ts_ns, c.event, c.parent)

    def _top(self, tid: int, ts_ns: int, event: str, api: str) -> None:
        """The thread's latest call at depth 0 (the flows' start)."""
        tops = self._tops
        if len(tops) >= MAX_THREADS and tid not in tops:
            del tops[next(iter(tops))]
        tops[tid] = (ts_ns, event, api)

    def _name_track(self, out: list[str], pid: int, tid: int, process: str,
                    rank: int | None) -> None:
        if pid not in self._processes or self._processes[pid] != rank:
            # named again once its rank is known (from its first communicator)
            self._processes[pid] = rank
            name = process if rank is None else f"{process} (rank {rank})"
            self._emit(out, {"name": "process_name", "ph": "M", "pid": pid, "tid": tid,
                             "args": {"name": name}})
        if (pid, tid) not in self._threads:
            self._threads.add((pid, tid))
            self._emit(out, {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                             "args": {"name": process}})

    def _record_slice(self, c: Call) -> str | None:
        """The slice of a call not decoded yet, straight from its record: the text
        _encode(self._slice(c)) would be (tests/unit/test_decoders.py checks, byte
        for byte), as row_maker writes it; None for a call that goes the long way."""
        lazy = c.as_recorded
        if lazy is None or c.py_stack is not None:
            return None
        d, rec = lazy
        parts_of, cat = self._probe_slices(d)
        return self._slice_text(parts_of(rec), cat, c.ts_ns, c.duration_ns, c.pid, c.tid)

    def _slice(self, c: Call) -> dict[str, Any]:
        ts = c.ts_ns - self._origin
        args = dict(c.args)
        name = c.event
        kernel = args.get(NAME_KEY) if c.category == "kernel" else None
        if kernel:
            name = shorten(kernel)
            args["call"] = c.event
        if c.duration_ns is None:  # never ended: shown as running to the end of the trace
            args["in_flight"] = True
            event = {"name": name, "cat": f"{c.api},{c.category}", "ph": "B", "ts": _us(ts)}
            self._last_ns = max(self._last_ns, ts)
        else:
            args["ret"] = c.ret
            args["ret_name"] = c.ret_name
            event = {"name": name, "cat": f"{c.api},{c.category}", "ph": "X", "ts": _us(ts),
                     "dur": _us(c.duration_ns)}
            self._last_ns = max(self._last_ns, ts + c.duration_ns)
        args["details"] = c.details
        if c.py_stack is not None and c.py_stack.missing is not None:
            args["py_stack_missing"] = c.py_stack.missing
        elif c.py_stack is not None:  # --py-stacks: innermost frame first
            args["py_stack"] = [f"{f['file']}:{f['line']} {f['function']}"
                                for f in c.py_stack.frames]
            if c.py_stack.borrowed is not None:  # another thread's: whose, and why
                args["py_stack_borrowed"] = c.py_stack.borrowed_text()
        if c.py_stack is not None and c.py_stack.node is not None:  # PyTorch's backward
            args["autograd_node"] = c.py_stack.node
            if c.py_stack.forward is not None:
                args["py_stack_forward"] = [f"{f['file']}:{f['line']} {f['function']}"
                                            for f in c.py_stack.forward]
            else:
                args["py_stack_forward_missing"] = c.py_stack.forward_missing
        event.update(pid=c.pid, tid=c.tid, args=args)
        return event

    def _gpu_slices(self, out: list[str], c: Call) -> None:
        """The call's GPU work on its device and stream tracks, a flow to each."""
        for w in c.gpu:
            pid = GPU_PID_BASE + w.device
            if pid not in self._processes:
                self._processes[pid] = None
                self._emit(out, {"name": "process_name", "ph": "M", "pid": pid, "tid": w.stream,
                                 "args": {"name": f"GPU {w.device}"}})
            if (pid, w.stream) not in self._threads:
                self._threads.add((pid, w.stream))
                self._emit(out, {"name": "thread_name", "ph": "M", "pid": pid, "tid": w.stream,
                                 "args": {"name": f"stream {w.stream}"}})
            if w.kind == "kernel":
                name, args = shorten(demangle(w.name)) or "kernel", {NAME_KEY: demangle(w.name)}
            else:
                name = f"{w.kind} {w.name}".rstrip()
                args = {"bytes": w.bytes}
            args.update(call=c.event, correlation=w.correlation, context=w.context)
            ts = w.start_ns - self._origin
            self._emit(out, {"name": name, "cat": f"gpu,{w.kind}", "ph": "X", "ts": _us(ts),
                             "dur": _us(w.duration_ns), "pid": pid, "tid": w.stream,
                             "args": args})
            self._last_ns = max(self._last_ns, ts + w.duration_ns)
            flow_id = self._next_flow
            self._next_flow += 1
            # from inside the call (1 ns in, as the driver flows) to the slice's start
            # ("bp": "e": bound to the slice that encloses it, the kernel's own)
            self._emit(out, {"name": f"{c.event} -> {name}", "cat": LAUNCH_FLOW_CATEGORY,
                             "ph": "s", "id": flow_id, "ts": _us(c.ts_ns + 1 - self._origin),
                             "pid": c.pid, "tid": c.tid})
            self._emit(out, {"name": f"{c.event} -> {name}", "cat": LAUNCH_FLOW_CATEGORY,
                             "ph": "f", "bp": "e", "id": flow_id, "ts": _us(ts), "pid": pid,
                             "tid": w.stream})

    def _flow(self, out: list[str], pid: int, tid: int, ts_ns: int, event: str,
              parent: int | None) -> None:
        """A flow from the runtime call this driver call was made in."""
        top = self._tops.get(tid)
        if top is None or top[0] != parent or top[2] != RUNTIME:
            return
        start, caller = top[0], top[1]
        name, flow_id = _encode(f"{caller} -> {event}"), self._next_flow
        self._next_flow += 1
        # the start, 1 ns into the runtime call (before any child), binds to it; the
        # end, 1 ns before the driver call, binds to the next slice: the driver call
        for ph, ns in (("s", start + 1), ("f", ts_ns - 1)):
            out.append(f'{self._sep}{{"name":{name},"cat":"{FLOW_CATEGORY}","ph":"{ph}",'
                       f'"id":{flow_id},"ts":{_us(ns - self._origin)!r},"pid":{pid},'
                       f'"tid":{tid}}}')
            self._breaks += self._sep != ""
            self._sep = ",\n"

    def finish(self, summary: Summary) -> None:
        event = {"name": SUMMARY_EVENT, "ph": "i", "s": "g", "ts": _us(self._last_ns),
                 "args": summary.to_dict()}
        out: list[str] = []
        self._emit(out, event)
        self.stream.write("".join(out) + "\n]\n")
        super().finish(summary)
