"""serve --prometheus without root: the address, the exposition a scrape gets,
a port taken, prometheus_client missing."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from opentelemetry.sdk.resources import Resource
from prometheus_client.parser import text_string_to_metric_families

from cudaprobe import __version__
from cudaprobe.analysis.metrics import LATENCY_BOUNDS_S, MAX_KERNELS, CallMetrics
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.errors import CudaprobeError, UsageError
from cudaprobe.output import prometheus
from cudaprobe.output.otlp_metrics import metrics_data
from cudaprobe.output.prometheus import (
    CannotListen,
    MetricsServer,
    _prometheus_client,
    parse_listen_address,
)
from cudaprobe.targets.injectable import OPTED_OUT, opted_out, refusal_reason

from ..conftest import HANG_S, cudaprobe_cmd
from .test_metrics import S, call


@pytest.mark.parametrize("text, address", [
    ("9464", ("127.0.0.1", 9464)),
    (":9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ("10.1.2.3:80", ("10.1.2.3", 80)),
    ("localhost:9464", ("localhost", 9464)),
    ("[::]:9464", ("::", 9464)),
    ("[::1]:1", ("::1", 1)),
    ("[]:9464", ("127.0.0.1", 9464)),
])
def test_listen_address(text, address):
    assert parse_listen_address(text) == address


@pytest.mark.parametrize("text, says", [
    ("", "port must be"),
    (":", "port must be"),
    ("host:", "port must be"),
    ("0", "port must be"),
    ("65536", "port must be"),
    (":http", "port must be"),
    ("::1:9464", "in brackets"),
    ("a:b:9464", "in brackets"),
    ("[::1]9464", "not [ADDR:]PORT"),
])
def test_bad_listen_address_is_one_line(text, says):
    with pytest.raises(UsageError) as e:
        parse_listen_address(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=HANG_S) as r:
        assert r.status == 200
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, name: str) -> dict[tuple, float]:
    """Each sample's labels (an empty one is no label, as Prometheus reads it) and value."""
    return {tuple(sorted((k, v) for k, v in s.labels.items() if v)): s.value
            for s in family.samples if s.name == name}


def test_a_scrape_gets_every_metric_with_its_labels_and_values():
    now = [0]
    m = CallMetrics(alive=lambda pid: True, clock=lambda: now[0])
    m.add([call("cudaMalloc", t=0, dur=2_000, ret=35, size=1 << 20),
           call("cudaMalloc", t=10, dur=2_000, devPtr="0x1000", size=4096),
           call("cudaMemcpy", t=20, dur=30_000, count=4096, kind="HostToDevice"),
           call("cuMemsetD32_v2", t=30, api="driver", N=4)])
    m.set_lost({"ringbuf_full": 2, "wakeups": 7})
    now[0] = S  # scraped with nothing fed for a second: every call made is in
    with MetricsServer(m, "127.0.0.1", free_port()) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/metrics")
        server.ready.set()
        got = scrape(server.url)
    assert samples(got["cudaprobe_build_info"], "cudaprobe_build_info") == {
        (("version", __version__),): 1}
    assert samples(got["cudaprobe_calls"], "cudaprobe_calls_total") == {
        (("api", "runtime"), ("function", "cudaMalloc"), ("process", "app")): 2,
        (("api", "runtime"), ("function", "cudaMemcpy"), ("process", "app")): 1,
        (("api", "driver"), ("function", "cuMemsetD32_v2"), ("process", "app")): 1}
    assert samples(got["cudaprobe_call_errors"], "cudaprobe_call_errors_total") == {
        (("error", "cudaErrorInsufficientDriver"), ("function", "cudaMalloc"),
         ("process", "app")): 1}
    hist = got["cudaprobe_call_duration_seconds"]
    assert hist.type == "histogram"
    buckets = {dict(k)["le"]: v for k, v in samples(hist, "cudaprobe_call_duration_seconds_bucket")
               .items() if dict(k)["function"] == "cudaMalloc"}
    assert len(buckets) == len(LATENCY_BOUNDS_S) + 1
    # cumulative: both 2 µs calls are under 2.5 µs and every bound above
    assert buckets["1e-06"] == 0 and buckets["2.5e-06"] == 2 and buckets["+Inf"] == 2
    count = samples(hist, "cudaprobe_call_duration_seconds_count")
    assert count[(("api", "runtime"), ("function", "cudaMemcpy"))] == 1
    assert samples(hist, "cudaprobe_call_duration_seconds_sum")[
        (("api", "runtime"), ("function", "cudaMalloc"))] == pytest.approx(4e-6)
    assert samples(got["cudaprobe_memcpy_bytes"], "cudaprobe_memcpy_bytes_total") == {
        (("api", "runtime"), ("kind", "HostToDevice")): 4096}
    assert samples(got["cudaprobe_memset_bytes"], "cudaprobe_memset_bytes_total") == {
        (("api", "driver"),): 16}
    live = samples(got["cudaprobe_memory_live_bytes"], "cudaprobe_memory_live_bytes")
    assert live[(("kind", "device"), ("process", "app"))] == 4096
    assert samples(got["cudaprobe_lost_events"], "cudaprobe_lost_events_total") == {
        (("cause", "ringbuf_full"),): 2}
    assert not any(n.startswith(("python_", "process_")) for n in got)  # own registry


def test_a_taken_port_is_one_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CannotListen) as e:
            MetricsServer(CallMetrics(), "127.0.0.1", port)
    assert str(e.value) == (f"cannot serve metrics on 127.0.0.1:{port}: address already in use "
                            "(choose another [ADDR:]PORT)")
    assert e.value.exit_code == 2


def test_an_address_not_here_is_one_clear_error():
    with pytest.raises(CannotListen, match=r"on 192\.0\.2\.1:\d+: "):
        MetricsServer(CallMetrics(), "192.0.2.1", free_port())  # TEST-NET-1: on no interface


def test_prometheus_client_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with pytest.raises(CudaprobeError) as e:
        _prometheus_client()
    assert str(e.value) == ("serve --prometheus needs prometheus_client "
                            "(pip install 'cudaprobe[prometheus]')")


def test_no_command_imports_prometheus_client():
    code = ("import importlib, sys; from cudaprobe.cli import COMMANDS; "
            "[importlib.import_module(m) for m, _ in COMMANDS.values()]; "
            "sys.exit(len(COMMANDS) < 8 or 'prometheus_client' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=HANG_S).returncode == 0


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cudaprobe_cmd(*args), capture_output=True, text=True, timeout=HANG_S)


def test_serve_without_an_exporter_or_with_a_bad_address_exits_2():
    for args, says in ((["serve"], "--prometheus [ADDR:]PORT"),
                       (["serve", "--prometheus", "::1:9464"], "in brackets")):
        p = run(*args)
        assert p.returncode == 2 and says in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_gpu_time_histogram_per_kernel_with_bounded_names():
    """serve --gpu-time: a histogram of GPU time per kernel name; past
    MAX_KERNELS names, the rest are one `other` series; copies are not kernels."""
    m = CallMetrics(alive=lambda pid: True)
    got = scrape_once(m)
    assert "cudaprobe_gpu_kernel_duration_seconds" not in got  # no --gpu-time: no series
    m.add_gpu([GpuWork(1, "kernel", 0, 3_000, 0, 1, 7, 1, "_Z6vecAddPfi"),
               GpuWork(1, "kernel", 0, 40_000, 0, 1, 7, 2, "_Z6vecAddPfi"),
               GpuWork(1, "memcpy", 0, 9_000, 0, 1, 7, 3, "HtoD", bytes=8)])
    m.add_gpu([GpuWork(1, "kernel", 0, 1_000, 0, 1, 7, 4, f"k{i}") for i in range(MAX_KERNELS)])
    hist = scrape_once(m)["cudaprobe_gpu_kernel_duration_seconds"]
    counts = samples(hist, "cudaprobe_gpu_kernel_duration_seconds_count")
    assert counts[(("kernel", "vecAdd(float*, int)"),)] == 2
    assert len(counts) == MAX_KERNELS + 1 and counts[(("kernel", "other"),)] == 1
    sums = samples(hist, "cudaprobe_gpu_kernel_duration_seconds_sum")
    assert sums[(("kernel", "vecAdd(float*, int)"),)] == pytest.approx(43e-6)
    buckets = {dict(k)["le"]: v for k, v in
               samples(hist, "cudaprobe_gpu_kernel_duration_seconds_bucket").items()
               if dict(k)["kernel"] == "vecAdd(float*, int)"}
    assert buckets["2.5e-06"] == 0 and buckets["5e-06"] == 1 and buckets["5e-05"] == 2


def scrape_once(m: CallMetrics) -> dict[str, object]:
    with MetricsServer(m, "127.0.0.1", free_port()) as server:
        server.ready.set()
        return scrape(server.url)


def test_metrics_answer_503_until_the_probes_are_in():
    """Bound before the probes are attached (a bad address is said at once), the
    server does not answer as a live tracer until serve says it is one."""
    with MetricsServer(CallMetrics(), "127.0.0.1", free_port()) as server:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url, timeout=10)
        assert refused.value.code == 503
        assert b"not attached yet" in refused.value.read()
        server.ready.set()
        with urllib.request.urlopen(server.url, timeout=10) as r:
            assert r.status == 200


def test_healthz_says_alive_while_starting_and_polling_and_not_once_the_loop_hangs(
        monkeypatch):
    """A liveness probe's answer: 200 while the probes go in (no poll yet) and while
    the trace loop gives its counters; 503 once it has not for HUNG_S."""
    metrics = CallMetrics()
    with MetricsServer(metrics, "127.0.0.1", free_port()) as server:
        health = server.url.replace("/metrics", "/healthz")
        with urllib.request.urlopen(health, timeout=10) as r:
            assert (r.status, r.read()) == (200, b"starting: the probes go in\n")
        server.ready.set()
        metrics.set_lost({})
        with urllib.request.urlopen(health, timeout=10) as r:
            assert (r.status, r.read()) == (200, b"ok\n")
        monkeypatch.setattr(prometheus, "HUNG_S", -1.0)  # the last poll is now too old
        with pytest.raises(urllib.error.HTTPError) as hung:
            urllib.request.urlopen(health, timeout=10)
        assert hung.value.code == 503
        assert b"the trace loop has not polled for" in hung.value.read()


@pytest.mark.parametrize("why, reason", [
    (OPTED_OUT, "opted_out"),
    ("it has exited", "exited"),
    ("it is a zombie", "exited"),
    ("ptrace is disabled on this machine (Yama ptrace_scope is 3)", "ptrace_denied"),
    ("ptrace is not allowed on it (Operation not permitted)", "ptrace_denied"),
    ("it is already traced by pid 7 (a debugger, or another cudaprobe)", "traced"),
    ("it is stopped (SIGSTOP, job control or a debugger): no thread of it can reach a "
     "safe point", "stopped"),
    ("its threads that make CUDA calls run under a seccomp filter, which ...", "seccomp"),
    ("it maps no CUDA library (libcuda, libcudart)", "no_cuda"),
    ("it holds the GPU-time library of another cudaprobe version: restart it", "other_cudaprobe"),
    ("its GPU-time library is recording for cudaprobe pid 9 (or one killed less than 5 s ago)",
     "other_cudaprobe"),
    ('the GPU-time library in it said: "CUPTI refused activity recording (CUptiResult 39)"',
     "cupti"),
    ("no thread of it entered a CUDA call within 5 s (the safe point ...): it runs on untouched",
     "no_cuda_call"),
    ("its C library (/lib/libc.so.6) has no dlopen", "c_library"),
    ('its loader refused the library: dlerror() said "x"', "c_library"),
    ("256 processes are waiting for the GPU-time library already: it runs on untouched", "busy"),
    ("the injection did not finish", "other"),
])
def test_each_refusal_of_the_gpu_time_library_has_a_reason_label(why, reason):
    assert refusal_reason(why) == reason


def test_gpu_time_outcomes_are_exported_only_where_the_library_goes_into_processes():
    m = CallMetrics(alive=lambda pid: True)
    got = scrape_once(m)
    assert "cudaprobe_gpu_time_processes" not in got and "cudaprobe_gpu_time_refusals" not in got
    m.gpu_injection()
    assert samples(scrape_once(m)["cudaprobe_gpu_time_processes"],
                   "cudaprobe_gpu_time_processes_total") == {(): 0}
    m.gpu_recording(10)
    m.gpu_recording(11)
    m.gpu_refused(12, "it is already traced by pid 7 (a debugger, or another cudaprobe)")
    m.gpu_refused(13, "it has exited")
    m.gpu_refused(14, "it has exited")
    got = scrape_once(m)
    assert samples(got["cudaprobe_gpu_time_processes"],
                   "cudaprobe_gpu_time_processes_total") == {(): 2}
    assert samples(got["cudaprobe_gpu_time_refusals"], "cudaprobe_gpu_time_refusals_total") == {
        (("reason", "exited"),): 2, (("reason", "traced"),): 1}
    data = metrics_data(m.snapshot(now_ns=1), Resource({}), 1, 2)
    by_name = {x.name: x for x in data.resource_metrics[0].scope_metrics[0].metrics}
    assert by_name["cudaprobe.gpu_time.processes"].data.data_points[0].value == 2
    assert {p.attributes["cudaprobe.gpu_time.reason"]: p.value
            for p in by_name["cudaprobe.gpu_time.refusals"].data.data_points} == {
        "exited": 2, "traced": 1}


@pytest.mark.parametrize("environ, out", [
    (b"HOME=/root\0CUDAPROBE_NO_GPU_TIME=1\0", True),
    (b"CUDAPROBE_NO_GPU_TIME=yes", True),
    (b"CUDAPROBE_NO_GPU_TIME=0\0", False),
    (b"CUDAPROBE_NO_GPU_TIME=\0", False),
    (b"CUDAPROBE_NO_GPU_TIME=0\0CUDAPROBE_NO_GPU_TIME=1\0", False),  # getenv's: the first
    (b"XCUDAPROBE_NO_GPU_TIME=1\0CUDAPROBE_NO_GPU_TIME", False),
    (b"", False),
])
def test_a_process_opts_out_of_the_gpu_time_library_by_its_environment(environ, out):
    assert (opted_out(environ) == OPTED_OUT) is out and (opted_out(environ) == "") is not out


def test_gpu_tools_are_left_without_the_gpu_time_library():
    why = opted_out(b"", b"nv-hostengine\n")
    assert why.startswith("it is nv-hostengine, a GPU tool") and refusal_reason(why) == "opted_out"
    assert opted_out(b"", b"python3\n") == ""
