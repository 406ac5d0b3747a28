"""Reading the BPF program's counting maps: per-function statistics (stats
mode), the kernel's tally of every call that returned (trace mode), return
codes, user stacks, and the loss counters."""

from __future__ import annotations

from typing import Any

from cudaprobe.probe.event import (
    LOST_DEPTH,
    LOST_PAIRING,
    LOST_RINGBUF,
    NR_COUNTERS,
    WAKEUPS,
    CallTally,
)
from cudaprobe.probe.plan import ProbePlan


class MapReader:
    """Reads, never writes: what the maps hold at the moment of reading."""

    def __init__(self, bpf: Any, plan: ProbePlan, stats: bool) -> None:
        self._bpf = bpf
        self.plan = plan
        self._stats = stats  # Settings.stats: per-function records in `stats`, else `tally`

    def read_stats(self) -> dict[int, list[tuple[int, ...]]]:
        """Stats program: probe id -> one struct cp_stat per CPU, as a flat tuple
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
        table = self._bpf["stats" if self._stats else "tally"]
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
        """The kernel's loss counters (and its forced wakeups), summed over CPUs."""
        table = self._bpf["counters"]
        totals = [sum(table[table.Key(i)]) for i in range(NR_COUNTERS)]
        return {
            "ringbuf_full": totals[LOST_RINGBUF],
            "pairing_map_full": totals[LOST_PAIRING],
            "wakeups": totals[WAKEUPS],
            "recursion_depth": totals[LOST_DEPTH],
        }
