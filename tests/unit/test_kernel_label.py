"""The kernel label of the metrics: bounded to the kernels launched most
lately, every series only growing (analysis.labels, Prometheus)."""

from __future__ import annotations

from cudaprobe.analysis.labels import OTHER
from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.decode.calls import Call
from cudaprobe.output.prometheus import MetricsServer

from .test_prometheus import free_port, samples, scrape


def launch(name: str | None, api: str = "runtime", event: str = "cudaLaunchKernel") -> Call:
    args = {"func": "0x401000"} | ({"func_name": name} if name else {})
    return Call(0.0, 0, 100, 101, "app", event, api, "kernel", 1_000, 0, "cudaSuccess", args, "")


def launches(m: CallMetrics, now_s: int) -> dict[tuple[str, str], int]:
    return m.snapshot(now_ns=now_s * 1_000_000_000).kernel_launches


def test_top_kernels_labelled_the_rest_other_and_no_series_shrinks(monkeypatch):
    monkeypatch.setattr("cudaprobe.analysis.metrics.MAX_KERNELS", 2)
    m = CallMetrics(alive=lambda pid: True)
    m.add([launch(n) for n in ["a", "b", "c", "c", "c", None]])
    # a and b took the two labels as they came (c's launches went to other); ranked
    # now, c (3) and a (1, labelled already) hold them: b stops being exported, and
    # c's series starts, counting from its next launch
    assert launches(m, 1) == {("a", "runtime"): 1, (OTHER, "runtime"): 4}
    m.add([launch("c"), launch("c"), launch("b", api="driver"), launch("b", api="driver"),
           launch("b", api="driver")])  # b is not labelled: other
    # c and b now (a made no launch): b's series is back as it was, a's is no longer exported
    assert launches(m, 2) == {("c", "runtime"): 2, ("b", "runtime"): 1, (OTHER, "runtime"): 4,
                              (OTHER, "driver"): 3}
    before = launches(m, 3)
    m.add([launch("a")])
    after = launches(m, 4)
    assert all(after[key] >= n for key, n in before.items() if key in after)  # none shrank


def test_prometheus_exports_kernel_launches_by_whole_name():
    long_name = "void ns::k<" + ", ".join(f"T{i}" for i in range(300)) + ">(int*)"
    m = CallMetrics(alive=lambda pid: True)
    m.add([launch(long_name), launch(long_name), launch(None),
           launch("vecAdd(float*)", api="driver", event="cuLaunchKernel"),
           Call(0.0, 0, 100, 101, "app", "cudaMalloc", "runtime", "memory", 1_000, 0,
                "cudaSuccess", {"size": 4}, "")])
    with MetricsServer(m, "127.0.0.1", free_port()) as server:
        server.ready.set()
        families = scrape(server.url + "/metrics")
    got = samples(families["cudaprobe_kernel_launches"], "cudaprobe_kernel_launches_total")
    assert got == {(("api", "runtime"), ("kernel", long_name)): 2,
                   (("api", "runtime"), ("kernel", OTHER)): 1,
                   (("api", "driver"), ("kernel", "vecAdd(float*)")): 1}
