"""Compiling, attaching and reading the BPF program; the one place bcc is used.

bcc raises bare `Exception`s; they are translated into BpfError here.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import time
import warnings
from typing import Any, Callable

from cudaprobe.errors import BccMissing, BpfError, NotRoot, ProcessGone
from cudaprobe.probe import bpfprog, cleanup, perf_uprobe, uprobe_multi
from cudaprobe.probe.event import (
    LOST_DEPTH,
    LOST_PAIRING,
    LOST_RINGBUF,
    NR_COUNTERS,
    RECORD_STRUCTS,
    STOPPED,
    STOPPING,
    TRACING,
    WAKEUPS,
    CallTally,
    RawEvent,
    from_record,
    unpack_event,
)
from cudaprobe.probe.plan import Attachment, ProbePlan
from cudaprobe.probe.ringbuf import RingBuffer
from cudaprobe.targets import environment

# EINVAL at attach: almost always another tracer's uprobe at the same address
# with a different reference-counter offset (see perf_uprobe.py)
REF_CTR_HINT = ("if dmesg says 'ref_ctr_offset mismatch', another tracer (a bcc Python tool) "
                "holds uprobes on these functions: stop it and retry")
# at the end, between the stop of new calls and the stop of returns: for the
# calls under way to return, and so to be whole in the trace
STOP_GRACE_S = 0.01


def prepare_machine() -> list[str]:
    """Everything tracing needs from the machine; returns notes for the user.
    Stale uprobe_events entries are removed once tracefs is there."""
    notes = [environment.ensure_tracefs(), cleanup.remove_stale_uprobe_events(),
             environment.ensure_kernel_headers(), environment.seccomp_warning()]
    return [n for n in notes if n]


def import_bcc() -> Any:
    try:
        # bcc 0.26's own source has invalid escapes ('\.'): Python says so while
        # compiling it (3.12 on stderr as a SyntaxWarning, 3.11 as a
        # DeprecationWarning), a line that is bcc's, not the user's to act on
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            import bcc  # noqa: PLC0415 - imported at run time: not on PyPI
    except ImportError as e:
        raise BccMissing(str(e)) from None
    return bcc


class Tracer:
    """Owns the BPF object: `with Tracer(plan, settings) as t: t.start(); t.poll(...)`.

    Entering compiles and attaches; no call is traced before start(), and none
    begins after detach() has begun, so that every function is traced over the
    same span, however long attaching and detaching the probes one by one take.
    """

    def __init__(self, plan: ProbePlan, settings: bpfprog.Settings) -> None:
        self.plan = plan
        self.settings = settings
        self._bpf: Any = None
        self._ring: RingBuffer | None = None
        self.attached: list[str] = []  # library paths probed
        self.attach_seconds = 0.0
        self._links: list[int] = []  # uprobe_multi link fds
        # per-process links (Settings.per_process): the libraries probed, and each
        # target process's links on them
        self._per_process = settings.per_process and settings.attach == "multi"
        self._libraries: dict[str, list[Attachment]] = {}
        self._pid_links: dict[int, list[int]] = {}
        self._pair_threads = int(bpfprog.defines(plan.probes, settings)["CP_PAIR_THREADS"])
        self._phase = 0  # event.ATTACHING: what the `phase` map holds

    def __enter__(self) -> Tracer:
        if os.geteuid() != 0:
            raise NotRoot()
        bcc = import_bcc()
        try:
            self._bpf = bcc.BPF(
                src_file=bpfprog.source_path().encode(),
                cflags=bpfprog.cflags(self.plan.probes, self.settings),
            )
        except Exception as e:  # bcc: compile errors are printed above by clang
            raise BpfError("compiling the BPF program failed", str(e),
                           fix="run `cudaprobe doctor`") from None
        try:
            self._attach_all()
            if not self.settings.stats:  # stats mode aggregates in maps: no events
                self._ring = RingBuffer(self._bpf["events"].map_fd,
                                        self.settings.ringbuf_pages * mmap.PAGESIZE,
                                        RECORD_STRUCTS)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach_all(self) -> None:
        start = time.monotonic()
        probes = self._bpf["probes"]
        for p in self.plan.probes:
            probes[probes.Key(p.func_id)] = probes.Leaf(*bpfprog.probe_config(p))
        by_path: dict[str, list[Attachment]] = {}
        for a in self.plan.attachments:
            by_path.setdefault(a.path, []).append(a)
        for path, atts in by_path.items():
            self.attach_library(path, atts)
        self.attach_seconds = time.monotonic() - start

    def attach_library(self, path: str, attachments: list[Attachment]) -> None:
        """Probe `attachments`, all in `path`: at start, or later while tracing.

        Their probe ids must be in the plan, whose `probes` map was filled at
        load time. Return probes go in first: a call entered between the two
        attaches then has no entry to pair with, rather than an entry that
        never completes and shows as in flight forever.
        """
        if self._per_process:
            self._libraries[path] = attachments
            for pid in list(self._pid_links):
                self._attach_process(pid, {path: attachments})
        elif self.settings.attach == "multi":
            self._links += self._attach_multi(path, attachments)
        else:
            self._attach_perf(attachments)
        self.attached.append(path)

    def _attach_process(self, pid: int, libraries: dict[str, list[Attachment]]) -> None:
        """Links for one target process on `libraries`; a process gone meanwhile
        (ESRCH) gets none, quietly: its exit is reported by whoever follows it."""
        links = self._pid_links.setdefault(pid, [])
        for path, atts in libraries.items():
            try:
                links += self._attach_multi(path, atts, pid)
            except ProcessGone:
                return

    def _attach_multi(self, path: str, atts: list[Attachment], pid: int = 0) -> list[int]:
        """[the return probes' link, the entry probes' link] (detach() counts on
        the pairs)."""
        links = []
        try:
            for fn_name, retprobe in ((b"cp_return", True), (b"cp_enter", False)):
                try:  # bcc loads each program once and hands the same one back after
                    fn = self._bpf.load_func(fn_name, self._bpf.KPROBE,
                                             attach_type=uprobe_multi.BPF_TRACE_UPROBE_MULTI)
                except Exception as e:
                    raise BpfError("loading the BPF program failed", str(e)) from None
                try:
                    links.append(uprobe_multi.create_link(
                        fn.fd, path, [a.offset for a in atts], [a.probe.func_id for a in atts],
                        retprobe, pid))
                except OSError as e:
                    if e.errno == errno.ESRCH:
                        raise ProcessGone(pid, "exited") from None
                    fix = REF_CTR_HINT if e.errno == errno.EINVAL else (
                        "set CUDAPROBE_ATTACH=perf on kernels without uprobe_multi")
                    raise BpfError(f"attaching {len(atts)} uprobes to {path}", e.strerror,
                                   fix=fix) from None
        except (BpfError, ProcessGone):
            for fd in links:
                os.close(fd)
            raise
        return links

    def _attach_perf(self, atts: list[Attachment]) -> None:
        for a in atts:
            addr = a.offset if a.is_pie_or_shared else a.vaddr
            for kind, fn in (("uretprobe", f"cp_return_{a.probe.func_id}"),
                             ("uprobe", f"cp_enter_{a.probe.func_id}")):
                try:
                    perf_uprobe.attach(self._bpf, fn, a.path, addr, kind == "uretprobe")
                except OSError as e:
                    raise BpfError(f"attaching {kind} to {a.probe.symbol} in {a.path}",
                                   e.strerror, fix=REF_CTR_HINT) from None

    def _set_phase(self, phase: int) -> None:
        if self._bpf is not None and phase > self._phase:
            table = self._bpf["phase"]
            table[table.Key(0)] = table.Leaf(phase)
            self._phase = phase

    def start(self) -> None:
        """Calls begin to be traced, in every function at once: call it when
        every probe of the start is attached (the kernel puts them in one at a
        time; a program calling meanwhile would otherwise be traced in some
        functions and not others). Probes attached later count at once."""
        self._set_phase(TRACING)

    def detach(self) -> None:
        """Stop the probes, all at once; the maps and ring buffer stay readable
        until close(). No call begins from now on (STOPPING, before any probe
        comes off: the kernel removes them one at a time); the calls under way
        get the entry probes' removal plus STOP_GRACE_S to return, whole, before
        returns stop being seen too (STOPPED); those still under way then are
        left in flight, reported as such."""
        stopping = self._phase == TRACING
        self._set_phase(STOPPING)
        links, self._links = self._links, []
        for pid_links in self._pid_links.values():
            links += pid_links
        self._pid_links = {}
        entry_links = links[1::2]  # each library's pair: (return, entry)
        for fd in reversed(entry_links):
            with contextlib.suppress(OSError):
                os.close(fd)
        if stopping:
            time.sleep(STOP_GRACE_S)
        self._set_phase(STOPPED)
        for fd in reversed(links[0::2]):
            with contextlib.suppress(OSError):
                os.close(fd)
        perf = [fd for _name, fd in (self._bpf.uprobe_fds.items() if self._bpf else [])]
        # perf probes fire until the closer is done, doing nothing (STOPPED); bcc
        # would close them one by one, 0.1 s each: a child process does it
        if perf and cleanup.close_in_background(perf):
            for name in list(self._bpf.uprobe_fds):
                self._bpf._del_uprobe_fd(name)

    def close(self) -> None:
        """Detach everything; safe to call twice."""
        self.detach()
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        if self._bpf is not None:
            bpf, self._bpf = self._bpf, None
            with contextlib.suppress(Exception):
                bpf.cleanup()

    def add_target(self, pid: int) -> None:
        """Trace this process (and, through the fork tracepoint, its children)."""
        targets = self._bpf["targets"]
        targets[targets.Key(pid)] = targets.Leaf(1)
        if self._per_process and pid not in self._pid_links:
            self._attach_process(pid, self._libraries)

    def follow_children(self) -> None:
        """Per-process links for the targets the fork tracepoint added (children of
        targets) since the last look. Until then a child takes no trap and its
        calls are not seen (docs/attach.md)."""
        if not self._per_process:
            return
        for pid in self.target_pids():
            if pid not in self._pid_links:
                self._attach_process(pid, self._libraries)

    def remove_target(self, pid: int) -> None:
        targets = self._bpf["targets"]
        with contextlib.suppress(KeyError):
            del targets[targets.Key(pid)]
        for fd in self._pid_links.pop(pid, []):
            with contextlib.suppress(OSError):
                os.close(fd)

    def target_pids(self) -> list[int]:
        """Processes traced now: those added, their children, --comm execs."""
        return [key.value for key in self._bpf["targets"].keys()]

    def set_comm(self, name: str) -> None:
        """Processes that exec under `name` become targets (Settings.filter_comm)."""
        table = self._bpf["comm_filter"]
        leaf = table.Leaf()
        leaf.name = name.encode()[:15]
        table[table.Key(0)] = leaf

    def poll(self, timeout_ms: int) -> list[RawEvent]:
        """Wait up to timeout_ms for a forced wakeup, then drain the ring buffer."""
        return [from_record(rec) for rec in self.poll_records(timeout_ms)]

    def drain(self) -> list[RawEvent]:
        """After detach(): every event left, the spool's backlog included."""
        events: list[RawEvent] = []
        while records := self._ring.drain():
            events += map(from_record, records)
        return events

    def poll_records(self, timeout_ms: int) -> list[tuple]:
        """poll(), as flat record tuples (event.R_* indices), for decode.RecordDecoder."""
        if self._ring.available() == 0:
            self._ring.wait(timeout_ms)
        return self._ring.consume()

    def drain_records(self) -> list[tuple]:
        """After detach(): the records left, a batch per call; [] when none are."""
        return self._ring.drain()

    def skip_records(self) -> int:
        """The drain cut short: how many records were left unread (now skipped)."""
        return self._ring.skip_rest() if self._ring is not None else 0

    def _owned_slots(self) -> list[tuple[int, int, int]]:
        """(slot, pid, tid) of the pairing slots that threads hold (`owners`)."""
        owners = self._bpf["owners"]
        held = []
        for slot in range(self._pair_threads):
            pid_tgid = owners[owners.Key(slot)].pid_tgid
            if pid_tgid:
                held.append((slot, pid_tgid >> 32, pid_tgid & 0xFFFFFFFF))
        return held

    def _calls_in_slot(self, slot: int) -> list[tuple[Any, Any]]:
        """(key, entry) of the slot's pairing entries in `owned` that are in a call."""
        owned, n = self._bpf["owned"], len(self.plan.probes)
        keys = (owned.Key(idx) for idx in range(slot * n, (slot + 1) * n))
        return [(k, e) for k, e in ((k, owned[k]) for k in keys) if e.ts_ns]

    def _entries(self) -> list[Any]:
        """The pairing entries in a call now: those of held slots in `owned`,
        then the hashed ones (`inflight`)."""
        found = [e for slot, _pid, _tid in self._owned_slots()
                 for _k, e in self._calls_in_slot(slot)]
        found += [v for v in self._bpf["inflight"].values() if v.ts_ns]
        return found

    def in_flight(self) -> list[RawEvent]:
        """Calls entered but not returned: the pairing entries, which stay between
        calls with ts_ns 0. (Trace mode; see in_flight_count.) Their
        out-parameters are not read yet: none are given."""
        return [unpack_event(bytes(v))._replace(outs=(), duration_ns=0)
                for v in self._entries()]

    def in_flight_count(self) -> int:
        return len(self._entries())

    def forget_exited(self, alive: Callable[[int, int], bool]) -> int:
        """Free the pairing slots and remove the hashed pairing entries of threads
        for which `alive(pid, tid)` is false: they exited, mid-call or not (each
        thread keeps an entry per probe between calls). A hashed entry not yet
        filled in (tid 0) is left. Returns how many were in a call (no return
        probe will end them)."""
        mid_call = 0
        owners, owned = self._bpf["owners"], self._bpf["owned"]
        for slot, pid, tid in self._owned_slots():
            if alive(pid, tid):
                continue
            for key, entry in self._calls_in_slot(slot):
                mid_call += 1
                entry.ts_ns = 0  # so that the slot's next thread does not pair with it
                owned[key] = entry
            owners[owners.Key(slot)] = owners.Leaf(0)
        table = self._bpf["inflight"]
        dead = [(k, v.ts_ns) for k, v in table.items() if v.tid and not alive(v.pid, v.tid)]
        for k, _ts in dead:
            with contextlib.suppress(KeyError):
                del table[k]
        return mid_call + sum(1 for _k, ts in dead if ts)  # those that were in a call

    def read_stats(self) -> dict[int, list[tuple[int, ...]]]:
        """CP_STATS: probe id -> one struct cp_stat per CPU, as a flat tuple
        (count, total_ns, min_ns, max_ns, errors_unkeyed, *hist, *hist_ns)."""
        table = self._bpf["stats"]
        out = {}
        for p in self.plan.probes:
            per_cpu = table[table.Key(p.func_id)]
            out[p.func_id] = [(v.count, v.total_ns, v.min_ns, v.max_ns, v.errors_unkeyed,
                               *v.hist, *v.hist_ns) for v in per_cpu]
        return out

    def read_errors(self) -> dict[tuple[int, int], int]:
        """(probe id, return code) -> failed calls, summed over CPUs: the codes each
        probe's per-CPU record holds (`stats`, or `tally` in trace mode), then the
        `error_codes` hash's."""
        errors: dict[tuple[int, int], int] = {}
        table = self._bpf["stats" if self.settings.stats else "tally"]
        for p in self.plan.probes:
            for v in table[table.Key(p.func_id)]:
                for ret, n in zip(v.err_ret, v.err_count):
                    if ret:
                        errors[p.func_id, ret] = errors.get((p.func_id, ret), 0) + n
        for k, v in self._bpf["error_codes"].items():
            errors[k.probe_id, k.ret] = errors.get((k.probe_id, k.ret), 0) + sum(v)
        return errors

    def read_tally(self) -> dict[int, CallTally]:
        """Trace mode: probe id -> the calls that returned, counted in the kernel
        whether or not the ring buffer took their records, summed over CPUs."""
        table, errors = self._bpf["tally"], self.read_errors()
        out = {}
        for p in self.plan.probes:
            per_cpu = table[table.Key(p.func_id)]
            out[p.func_id] = CallTally(
                sum(v.count for v in per_cpu), sum(v.total_ns for v in per_cpu),
                {ret: n for (fid, ret), n in errors.items() if fid == p.func_id},
                sum(v.errors_unkeyed for v in per_cpu))
        return out

    def user_stack(self, stack_id: int) -> list[tuple[str, int]]:
        """CP_STACKS: the frames of a recorded user stack, innermost first, each
        (build-id in hex, file offset) as the kernel resolved it; the walk ends
        at the first frame it could not resolve so."""
        if stack_id < 0:
            return []
        try:
            return [(bytes(f.build_id).hex(), f.offset)
                    for f in self._bpf["stacks"].walk(stack_id)]
        except KeyError:  # evicted, or never stored
            return []

    def counters(self) -> dict[str, int]:
        table = self._bpf["counters"]
        totals = [sum(table[table.Key(i)]) for i in range(NR_COUNTERS)]
        return {
            "ringbuf_full": totals[LOST_RINGBUF],
            "pairing_map_full": totals[LOST_PAIRING],
            "wakeups": totals[WAKEUPS],
            "recursion_depth": totals[LOST_DEPTH],
            "malformed": self._ring.malformed if self._ring else 0,
        }
