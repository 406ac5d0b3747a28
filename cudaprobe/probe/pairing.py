"""The pairing entries: where an entry probe keeps a call until its return
probe takes it. Each thread holds a slot of `owned` (an entry per probe,
found by `owners`) or, when the slots are taken, entries in the `inflight`
hash. An entry (struct cp_trace_entry or cp_stats_entry) is the count of calls
nested in it, then the `call` it holds, read here by name; it stays between
calls with call.ts_ns 0. Read at the end for the calls still in flight, and
swept of threads that exited (sweep.py). Under serve --duty, an entry of a
sampled function holding a call begun before the slice under way (map
`slice_start`) is not in a call: its return came after the links were out,
and the probes let it go at the thread's next return (bpf/pairing.bpf.h)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from cudaprobe.probe import bpfprog
from cudaprobe.probe.event import RawEvent, unpack_event
from cudaprobe.probe.plan import ProbePlan


def _probe_of(key: Any) -> int:
    """The probe of a hashed (`inflight`) entry's key: its low 16 bits."""
    return key.value & 0xFFFF


class PairingEntries:
    def __init__(self, bpf: Any, plan: ProbePlan, settings: bpfprog.Settings) -> None:
        self._bpf = bpf
        self.plan = plan
        self._pair_threads = int(bpfprog.defines(plan.probes, settings)["CP_PAIR_THREADS"])
        # the probes whose links stay in between serve --duty's slices
        self._kept = {p.func_id for p in plan.probes if settings.kept(p)}
        self._duty = bool(settings.duty_exact)  # the program has `slice_start` (CP_DUTY)

    def _slice_start(self) -> int:
        """When serve --duty's slice under way began (CLOCK_MONOTONIC ns; 0)."""
        if not self._duty:
            return 0
        table = self._bpf["slice_start"]
        return table[table.Key(0)].value

    def _in_call(self, probe_id: int, entry: Any, start: int) -> bool:
        """The entry holds a call that may still return: not one of a sampled
        function begun before the slice under way began (serve --duty)."""
        ts = entry.call.ts_ns
        return bool(ts) and (ts >= start or probe_id in self._kept)

    def _owned_slots(self) -> list[tuple[int, int, int]]:
        """(slot, pid, tid) of the pairing slots that threads hold (`owners`)."""
        owners = self._bpf["owners"]
        held = []
        for slot in range(self._pair_threads):
            pid_tgid = owners[owners.Key(slot)].pid_tgid
            if pid_tgid:
                held.append((slot, pid_tgid >> 32, pid_tgid & 0xFFFFFFFF))
        return held

    def _filled_in_slot(self, slot: int) -> list[tuple[int, Any, Any]]:
        """(probe id, key, entry) of the slot's pairing entries in `owned` that
        hold a call (one of an earlier slice too)."""
        owned, n = self._bpf["owned"], len(self.plan.probes)
        filled = []
        for probe_id in range(n):
            key = owned.Key(slot * n + probe_id)
            entry = owned[key]
            if entry.call.ts_ns:
                filled.append((probe_id, key, entry))
        return filled

    def _entries(self) -> list[Any]:
        """The pairing entries in a call now: those of held slots in `owned`,
        then the hashed ones (`inflight`)."""
        start = self._slice_start()
        found = [e for slot, _pid, _tid in self._owned_slots()
                 for probe_id, _k, e in self._filled_in_slot(slot)
                 if self._in_call(probe_id, e, start)]
        found += [v for k, v in self._bpf["inflight"].items()
                  if self._in_call(_probe_of(k), v, start)]
        return found

    def in_flight(self) -> list[RawEvent]:
        """Calls entered but not returned: the pairing entries, which stay between
        calls with ts_ns 0. (Trace mode; see in_flight_count.) Their
        out-parameters are not read yet: none are given."""
        return [unpack_event(bytes(v.call))._replace(outs=(), duration_ns=0)
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
        start = self._slice_start()
        owners, owned = self._bpf["owners"], self._bpf["owned"]
        for slot, pid, tid in self._owned_slots():
            if alive(pid, tid):
                continue
            for probe_id, key, entry in self._filled_in_slot(slot):
                mid_call += self._in_call(probe_id, entry, start)
                entry.call.ts_ns = 0  # so that the slot's next thread does not pair with it
                owned[key] = entry
            owners[owners.Key(slot)] = owners.Leaf(0)
        table = self._bpf["inflight"]
        dead = [(k, self._in_call(_probe_of(k), v, start)) for k, v in table.items()
                if v.call.tid and not alive(v.call.pid, v.call.tid)]
        for k, _in_call in dead:
            with contextlib.suppress(KeyError):
                del table[k]
        return mid_call + sum(1 for _k, in_call in dead if in_call)  # those that were in a call
