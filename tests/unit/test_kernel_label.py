"""The kernel label of the metrics: bounded to the kernels launched most,
every series only growing (analysis.metrics.KernelLaunches, Prometheus)."""

from __future__ import annotations

from cudaprobe.analysis.metrics import OTHER, CallMetrics, KernelLaunches
from cudaprobe.decode.calls import Call
from cudaprobe.output.prometheus import MetricsServer

from .test_prometheus import free_port, samples, scrape


def launch(name: str | None, api: str = "runtime", event: str = "cudaLaunchKernel") -> Call:
    args = {"func": "0x401000"} | ({"func_name": name} if name else {})
    return Call(0.0, 0, 100, 101, "app", event, api, "kernel", 1_000, 0, "cudaSuccess", args, "")


def test_top_kernels_labelled_the_rest_other_and_no_series_shrinks():
    k = KernelLaunches(max_kernels=2)
    for name in ["a", "b", "c", "c", "c", None]:
        k.add(name, "runtime")
    # a and b took the two labels as they came (c's launches went to other); ranked
    # now, c (3) and a (1, before b by name) hold them: b stops being exported, and
    # c's series starts, counting from its next launch
    assert k.rank() == {("a", "runtime"): 1, (OTHER, "runtime"): 4}
    k.add("c", "runtime")
    k.add("c", "runtime")
    k.add("b", "driver")  # not labelled: other
    # c (5) and b (2) now: b's series is back as it was, a's is no longer exported
    assert k.rank() == {("c", "runtime"): 2, ("b", "runtime"): 1, (OTHER, "runtime"): 4,
                        (OTHER, "driver"): 1}
    before = k.rank()
    k.add("a", "runtime")
    after = k.rank()
    assert all(after[key] >= n for key, n in before.items() if key in after)  # none shrank


def test_prometheus_exports_kernel_launches_by_whole_name():
    long_name = "void ns::k<" + ", ".join(f"T{i}" for i in range(300)) + ">(int*)"
    m = CallMetrics(alive=lambda pid: True)
    m.add([launch(long_name), launch(long_name), launch(None),
           launch("vecAdd(float*)", api="driver", event="cuLaunchKernel"),
           Call(0.0, 0, 100, 101, "app", "cudaMalloc", "runtime", "memory", 1_000, 0,
                "cudaSuccess", {"size": 4}, "")])
    with MetricsServer(m, "127.0.0.1", free_port()) as server:
        families = scrape(server.url + "/metrics")
    got = samples(families["cudaprobe_kernel_launches"], "cudaprobe_kernel_launches_total")
    assert got == {(("api", "runtime"), ("kernel", long_name)): 2,
                   (("api", "runtime"), ("kernel", OTHER)): 1,
                   (("api", "driver"), ("kernel", "vecAdd(float*)")): 1}
