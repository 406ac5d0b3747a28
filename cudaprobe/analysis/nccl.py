"""stats --by collective: NCCL's operations per size, as nccl-tests reports
them, and per communicator who waited for whom.

`collective_stats(calls, window)`: a row per operation (nccl_ops.py: a call,
or a group's calls on one communicator), size, datatype and rank: calls,
failed calls, time per call, and nccl-tests' algbw (size / time) and busbw
(algbw x the collective's bus factor, nccl_shapes.py). The time per call is
the GPU's where --gpu-time joined the NCCL kernels to their calls:

- `gpu`: the operation's kernels seen on every rank of its communicator:
  from the last rank's kernel start to this rank's kernel end, the transfer
  once every rank had joined, without the time this rank's kernel spent
  waiting for the others (which is in the waits, nccl_waits.py);
- `kernel`: not every rank of the communicator traced (the last to start
  may be one not seen): this rank's whole kernel, waits and all;
- `host`: no GPU time: how long the call took on the CPU, which is how long
  NCCL took to queue it, not to move the bytes: no bandwidth is given.

A row's calls that failed (an error returned) moved nothing and are in its
time by none of these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudaprobe.analysis.nccl_ops import Operation, communicators, operations
from cudaprobe.analysis.nccl_shapes import Shape
from cudaprobe.analysis.nccl_waits import CommWaits, Window, comm_waits, transfer_ns
from cudaprobe.decode.calls import Call

GPU, KERNEL, HOST = "gpu", "kernel", "host"


@dataclass
class SizeRow:
    name: str  # the NCCL call, or the group ("ncclGroup[ncclSend+ncclRecv]")
    shape: Shape
    pid: int
    rank: int | None
    nranks: int | None
    bytes: int  # what each call passed (count x datatype size, its calls together)
    size: int | None  # bytes as nccl-tests counts them; None: the number of ranks unknown
    count: int | None  # elements of `type` in `size`
    type: str
    calls: int = 0
    failed: int = 0
    host_ns: int = 0  # summed, calls that did not fail
    gpu: list[int] = field(default_factory=list)  # each call's GPU time, every rank seen
    kernel: list[int] = field(default_factory=list)  # each call's whole kernel time

    @property
    def timed_by(self) -> str:
        return GPU if self.gpu else KERNEL if self.kernel else HOST

    @property
    def timed_calls(self) -> int:
        return len(self.gpu or self.kernel) if self.timed_by != HOST else self.calls - self.failed

    @property
    def time_ns(self) -> int | None:
        """The mean time of one call, from what `timed_by` says."""
        times = self.gpu or self.kernel
        if times:
            return sum(times) // len(times)
        ok = self.calls - self.failed
        return self.host_ns // ok if ok else None

    @property
    def algbw(self) -> float | None:
        """GB/s (1e9 bytes a second: a byte a ns) from the GPU time, as nccl-tests' algbw."""
        t = self.time_ns
        return self.size / t if t and self.size is not None and self.timed_by != HOST else None

    @property
    def busbw(self) -> float | None:
        factor = self.shape.bus_factor(self.nranks)
        return self.algbw * factor if self.algbw is not None and factor is not None else None

    def to_dict(self) -> dict[str, Any]:
        def rounded(v: float | None) -> float | None:
            return None if v is None else round(v, 3)
        ok = self.calls - self.failed
        return {"operation": self.name, "nccl_tests": self.shape.test or None,
                "pid": self.pid, "rank": self.rank, "nranks": self.nranks,
                "bytes": self.bytes, "size": self.size, "count": self.count, "type": self.type,
                "calls": self.calls, "failed": self.failed,
                "timed_by": self.timed_by, "timed_calls": self.timed_calls,
                "time_ns": self.time_ns,
                "kernel_avg_ns": sum(self.kernel) // len(self.kernel) if self.kernel else None,
                "host_avg_ns": self.host_ns // ok if ok else None,
                "algbw_gbps": rounded(self.algbw), "busbw_gbps": rounded(self.busbw),
                "bus_factor": self.shape.bus or None}


@dataclass
class NcclStats:
    rows: list[SizeRow]
    waits: list[CommWaits]
    gpu_time: bool = False  # some operation had GPU time: waits could be measured

    def to_dict(self) -> dict[str, Any]:
        return {"collectives": [r.to_dict() for r in self.rows],
                "waits": [w.to_dict() for w in self.waits]}


def collective_stats(calls: list[Call], window: Window | None = None) -> NcclStats:
    """`calls`: the NCCL calls of every traced process, GPU work joined where
    there was; `window`: the run (CLOCK_MONOTONIC ns), which no rank's waits
    exceed."""
    ops = operations(calls)
    comms = communicators(ops)
    waits = [comm_waits(c, window) for c in comms if len(c.by_pid) > 1]
    rows: dict[tuple, SizeRow] = {}
    for op in ops:
        r = op.row
        key = (r.name, op.pid, op.rank, op.nranks, r.bytes, r.type)
        row = rows.get(key)
        if row is None:
            row = rows[key] = SizeRow(r.name, r.shape, op.pid, op.rank, op.nranks, r.bytes,
                                      r.size, r.count, r.type)
        _add(row, op)
    ordered = sorted(rows.values(), key=lambda r: (r.name, r.bytes, r.type, r.rank is None,
                                                   r.rank or 0, r.pid))
    return NcclStats(ordered, waits, any(op.gpu for op in ops))


def _add(row: SizeRow, op: Operation) -> None:
    row.calls += 1
    if op.failed:
        row.failed += 1
        return
    row.host_ns += op.host_ns
    if op.gpu:
        row.kernel.append(op.end_ns - op.start_ns)
        after_all = transfer_ns(op)
        if after_all is not None:
            row.gpu.append(after_all)
