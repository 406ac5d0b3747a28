"""GPU time in numbers (`stats --gpu-time`): per kernel name, the launches
and their GPU time (total, avg, min, max, p50, p99), as Nsight Systems'
`nsys stats -r cuda_gpu_kern_sum` gives them; per copy kind (memcpy HtoD,
DtoH, ..., memset), the GPU time, the bytes and the bandwidth. Percentiles
are exact (nearest rank over every duration), not from buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cudaprobe.decode.demangle import demangle
from cudaprobe.decode.gputime import GpuWork


def _nearest_rank(ordered: list[int], q: float) -> int:
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class GpuRow:
    """One kernel name, or one copy kind: the durations of its GPU work."""
    name: str
    durations: list[int] = field(default_factory=list)  # ns, sorted once complete
    bytes: int = 0
    backward_ns: int = 0  # per Python line: of it, PyTorch's backward work of the line's ops

    @property
    def calls(self) -> int:
        return len(self.durations)

    @property
    def total_ns(self) -> int:
        return sum(self.durations)

    def to_dict(self, kernel: bool) -> dict[str, Any]:
        d = self.durations
        row: dict[str, Any] = {"name": self.name, "calls": len(d), "total_ns": sum(d),
                               "avg_ns": round(sum(d) / len(d)), "min_ns": d[0],
                               "max_ns": d[-1], "p50_ns": _nearest_rank(d, 50),
                               "p99_ns": _nearest_rank(d, 99)}
        if self.backward_ns:  # per line: the total split into forward and backward work
            row["forward_ns"] = row["total_ns"] - self.backward_ns
            row["backward_ns"] = self.backward_ns
        if not kernel:
            row["bytes"] = self.bytes
            # bytes per ns is GB/s
            row["bandwidth_gbps"] = round(self.bytes / sum(d), 3) if sum(d) else None
        return row


@dataclass
class GpuStats:
    kernels: list[GpuRow]  # by total GPU time, largest first
    copies: list[GpuRow]
    dropped: int = 0  # records CUPTI dropped: the numbers miss them
    per: str = "kernel"  # what a row is: a kernel name (and copy kind), or a Python line

    @property
    def kernel_ns(self) -> int:
        return sum(r.total_ns for r in self.kernels)

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": [r.to_dict(True) for r in self.kernels],
                "copies": [r.to_dict(False) for r in self.copies],
                "kernel_total_ns": self.kernel_ns, "dropped": self.dropped,
                **({"per": self.per} if self.per != "kernel" else {})}


def gpu_stats(work: list[GpuWork], dropped: int = 0) -> GpuStats:
    kernels: dict[str, GpuRow] = {}
    copies: dict[str, GpuRow] = {}
    for w in work:
        if w.kind == "kernel":
            name = demangle(w.name) if w.name else "(kernel unnamed)"
            row = kernels.get(name) or kernels.setdefault(name, GpuRow(name))
        else:
            name = f"{w.kind} {w.name}".rstrip()
            row = copies.get(name) or copies.setdefault(name, GpuRow(name))
            row.bytes += w.bytes
        row.durations.append(w.duration_ns)
    for row in (*kernels.values(), *copies.values()):
        row.durations.sort()

    def by_total(rows: dict[str, GpuRow]) -> list[GpuRow]:
        return sorted(rows.values(), key=lambda r: (-r.total_ns, r.name))
    return GpuStats(by_total(kernels), by_total(copies), dropped)
