"""stats --by kernel: launches counted per kernel name from decoded calls."""

from __future__ import annotations

from cudaprobe.analysis.stats import KernelTally, slot_of
from cudaprobe.decode.calls import Call

LONG = "void ns::k<" + ", ".join(f"T{i}" for i in range(400)) + ">(int*)"


def launch(name: str | None, ns: int | None, ret: int = 0, event: str = "cudaLaunchKernel",
           category: str = "kernel") -> Call:
    args = {"func": "0x401000"} | ({"func_name": name} if name else {})
    return Call(0.0, 0, 1, 1, "app", event, "runtime", category, ns, ret,
                "cudaSuccess" if not ret else "cudaErrorInvalidValue", args, "")


def test_launches_counted_per_kernel_name():
    tally = KernelTally()
    tally.add([launch(LONG, 1000), launch(LONG, 3000, ret=1), launch("vecAdd(float*)", 50),
               launch(None, 70), launch(None, 90, event="cuLaunchKernel"),
               launch(LONG, None),  # still running at the end: no duration, not counted
               launch(None, 5, event="cudaMalloc", category="memory")])
    by = {s.event: s for s in tally.functions}
    assert set(by) == {LONG, "vecAdd(float*)", "cudaLaunchKernel (kernel unknown)",
                       "cuLaunchKernel (kernel unknown)"}
    k = by[LONG]  # whole, however long
    assert (k.count, k.total_ns, k.min_ns, k.max_ns, k.avg_ns) == (2, 4000, 1000, 3000, 2000)
    assert k.errors == {"cudaErrorInvalidValue": 1}
    assert k.hist[slot_of(1000)] == 1 and k.hist_ns[slot_of(3000)] == 3000
    assert by["vecAdd(float*)"].to_dict()["p50_ns"] == 50
    assert by["vecAdd(float*)"].failed == 0
