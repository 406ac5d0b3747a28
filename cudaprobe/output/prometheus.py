"""The metrics of metrics.py as Prometheus metrics, served over HTTP.

A collector turns each scrape into one `CallMetrics.snapshot()`, in its own
CollectorRegistry (not prometheus_client's global one, which would add the
Python process's own metrics). prometheus_client is imported only here and
only when serving: `trace` and the rest work without it.
"""

from __future__ import annotations

import errno
import re
import socket
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from cudaprobe import __version__
from cudaprobe.analysis.metrics import (
    LATENCY_BOUNDS_S,
    MAX_KERNELS,
    MAX_LINES,
    MAX_PROCESSES,
    CallMetrics,
    Histogram,
)
from cudaprobe.errors import CudaprobeError, UsageError
from cudaprobe.targets.jobs import JOB_LABELS

DEFAULT_HOST = "127.0.0.1"
_ADDRESS = re.compile(r"(?:(?P<host>\[[^\]]*\]|[^:\[\]]*):)?(?P<port>[^:]*)")


class CannotListen(CudaprobeError):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"cannot serve metrics on {where}: {why}",
                         fix="choose another [ADDR:]PORT")


def parse_listen_address(text: str) -> tuple[str, int]:
    """`[ADDR:]PORT` -> (host, port): "9464" and ":9464" are 127.0.0.1:9464,
    "0.0.0.0:9464" every IPv4 address, "[::]:9464" every address."""
    m = _ADDRESS.fullmatch(text.strip())
    if m is None:
        hint = " (an IPv6 address goes in brackets: [::1]:9464)" if text.count(":") > 1 else ""
        raise UsageError(f"--prometheus {text!r} is not [ADDR:]PORT, such as :9464 or "
                         f"0.0.0.0:9464{hint}")
    host = (m.group("host") or "").strip("[]") or DEFAULT_HOST
    port = m.group("port")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"--prometheus {text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def show_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _prometheus_client() -> Any:
    try:
        import prometheus_client  # noqa: PLC0415 - optional: only serve --prometheus needs it
    except ImportError:
        raise CudaprobeError("serve --prometheus needs prometheus_client",
                             fix="pip install 'cudaprobe[prometheus]'") from None
    return prometheus_client


class CallCollector:
    """A prometheus_client collector over one CallMetrics."""

    def __init__(self, metrics: CallMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list:
        return []  # nothing to collect at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (  # noqa: PLC0415
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
            InfoMetricFamily,
        )
        from prometheus_client.utils import floatToGoString  # noqa: PLC0415

        snap = self.metrics.snapshot()
        yield InfoMetricFamily("cudaprobe_build", "cudaprobe's version.",
                               value={"version": __version__})
        calls = CounterMetricFamily(
            "cudaprobe_calls", f"CUDA API calls completed, by process name: the "
            f"{MAX_PROCESSES} making the most calls lately, the rest as `other`.",
            labels=["function", "api", "process", *JOB_LABELS])
        yield _without_empty_jobs(_filled(calls, snap.calls))
        errors = CounterMetricFamily("cudaprobe_call_errors",
                                     "CUDA API calls that returned an error, by result name.",
                                     labels=["function", "error", "process", *JOB_LABELS])
        yield _without_empty_jobs(_filled(errors, snap.errors))
        latency = HistogramMetricFamily("cudaprobe_call_duration_seconds",
                                        "CUDA API call latency, entry to return.",
                                        labels=["function", "api"])
        les = [floatToGoString(b) for b in LATENCY_BOUNDS_S] + ["+Inf"]

        def buckets(h: Histogram) -> list[tuple[str, int]]:
            running, out = 0, []
            for le, n in zip(les, h.counts):
                running += n
                out.append((le, running))
            return out
        for labels, h in sorted(snap.latency.items()):
            latency.add_metric(labels, buckets(h), h.sum_s)
        yield latency
        if snap.gpu_time:
            gpu = HistogramMetricFamily(
                "cudaprobe_gpu_kernel_duration_seconds",
                f"Kernels' time on the GPU (serve --gpu-time, CUPTI), by kernel name: the "
                f"{MAX_KERNELS} with the most GPU time lately, the rest as `other`.",
                labels=["kernel"])
            for name, h in sorted(snap.gpu_time.items()):
                gpu.add_metric([name], buckets(h), h.sum_s)
            yield gpu
        if snap.gpu_lines_unjoined is not None:  # serve --gpu-time --py-stacks
            by_line = CounterMetricFamily(
                "cudaprobe_gpu_line_seconds",
                f"Kernels' time on the GPU by the Python line that launched them, backward "
                f"work on its forward op's line (serve --gpu-time --py-stacks): for each "
                f"process the {MAX_LINES} lines with the most lately, the rest as `other`; "
                f"with --duty, the kernels of the launches traced, each as many as the "
                f"sampling ratio's inverse (an estimate).",
                labels=["line", "process", *JOB_LABELS])
            yield _without_empty_jobs(_filled(by_line, snap.gpu_lines))
            unjoined = CounterMetricFamily(
                "cudaprobe_gpu_line_unjoined",
                "CUPTI's records of launches made while the probes were on, not given a line: "
                "no_traced_launch (its launch not traced: a thread or function not probed), "
                "bound (let go at a memory bound of the join), no_api_record (kernels whose "
                "API record never came).", labels=["reason"])
            yield _filled(unjoined, snap.gpu_lines_unjoined)
        copied = CounterMetricFamily("cudaprobe_memcpy_bytes",
                                     "Bytes copied by successful memcpy calls, by direction.",
                                     labels=["kind", "api"])
        yield _filled(copied, snap.memcpy_bytes)
        memset = CounterMetricFamily("cudaprobe_memset_bytes",
                                     "Bytes set by successful memset calls.", labels=["api"])
        yield _filled(memset, snap.memset_bytes)
        live = GaugeMetricFamily("cudaprobe_memory_live_bytes",
                                 "CUDA memory allocated and not freed, by running process.",
                                 labels=["process", *JOB_LABELS, "kind"])
        yield _without_empty_jobs(_filled(live, snap.live_bytes))
        launches = CounterMetricFamily(
            "cudaprobe_kernel_launches",
            f"Kernel launches completed, by kernel name: the {MAX_KERNELS} launched most "
            "lately, the rest and those of unknown name as `other`.", labels=["kernel", "api"])
        yield _filled(launches, snap.kernel_launches)
        if snap.gpu_time_processes is not None:  # serve --gpu-time into running processes
            recording = CounterMetricFamily(
                "cudaprobe_gpu_time_processes", "Processes the GPU-time library was put in "
                "(serve --gpu-time with --pid, --comm or on a node).")
            recording.add_metric([], snap.gpu_time_processes)
            yield recording
            refusals = CounterMetricFamily(
                "cudaprobe_gpu_time_refusals", "Processes the GPU-time library could not go "
                "into, by reason (docs/gputime.md): opted_out, exited, ptrace_denied, traced, "
                "stopped, seccomp, no_cuda, other_cudaprobe, cupti, no_cuda_call, c_library, "
                "busy, other.",
                labels=["reason"])
            yield _filled(refusals, snap.gpu_time_refusals)
        sampling = GaugeMetricFamily(
            "cudaprobe_sampling_ratio", "The fraction of the time the probes are on (serve "
            "--duty; 1: every call counted): the counts are what was seen over it.")
        sampling.add_metric([], snap.sampling_ratio)
        yield sampling
        if snap.sampling_ratio < 1:
            windows = CounterMetricFamily("cudaprobe_sampled_windows",
                                          "Slices of time traced so far (serve --duty).")
            windows.add_metric([], snap.sampled_windows)
            yield windows
            if snap.sampling_relative_error:
                error = GaugeMetricFamily(
                    "cudaprobe_sampling_relative_error",
                    "The relative standard error of the node's scaled totals (serve --duty), "
                    "from the spread of what its slices saw: calls (of the sampled functions), "
                    "gpu_time. A series of a share of them has more.", labels=["quantity"])
                yield _filled(error, snap.sampling_relative_error)
        lost = CounterMetricFamily("cudaprobe_lost_events",
                                   "Traced calls lost before they were counted, by cause.",
                                   labels=["cause"])
        yield _filled(lost, snap.lost)


def _filled(family: Any, values: dict) -> Any:
    """`family` with a sample per item of `values`, in order: its key the
    labels' values (a tuple), or the one label's value."""
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _without_empty_jobs(family: Any) -> Any:
    """A process's job labels it has none of left out of its samples (Prometheus
    reads an empty label as none: the text is shorter, the series the same)."""
    family.samples = [s._replace(labels={k: v for k, v in s.labels.items()
                                         if v or k not in JOB_LABELS})
                      for s in family.samples]
    return family


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """No line per scrape."""


# /healthz answers 503 when the trace loop has not polled for this long (it polls
# about each second; a drain of a long backlog polls too)
HUNG_S = 60.0


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsServer:
    """/metrics of `metrics` on host:port, on a thread, until close()."""

    def __init__(self, metrics: CallMetrics, host: str, port: int) -> None:
        client = _prometheus_client()
        registry = client.CollectorRegistry(auto_describe=False)
        registry.register(CallCollector(metrics))
        where = show_address(host, port)
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except socket.gaierror as e:
            raise CannotListen(where, (e.strerror or str(e)).lower()) from None
        server_class = type("Server", (_ThreadingServer,), {"address_family": family})
        # set once the probes are in: until then /metrics answers 503, so that no
        # scrape and no readiness check takes the address for a live tracer
        self.ready = threading.Event()
        metrics_app = client.make_wsgi_app(registry)

        def app(environ: dict, start_response: Callable) -> list[bytes]:
            if environ.get("PATH_INFO") == "/healthz":
                return self._health(metrics, start_response)
            if not self.ready.is_set():
                start_response("503 Service Unavailable",
                               [("Content-Type", "text/plain; charset=utf-8")])
                return [b"cudaprobe: the probes are not attached yet\n"]
            return metrics_app(environ, start_response)

        try:
            self.server = make_server(host, port, app, server_class, _QuietHandler)
        except OSError as e:
            why = "address already in use" if e.errno == errno.EADDRINUSE else (
                e.strerror or str(e)).lower()
            raise CannotListen(where, why) from None
        self.url = f"http://{where}/metrics"
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics",
                                        daemon=True)
        self._thread.start()

    def _health(self, metrics: CallMetrics, start_response: Callable) -> list[bytes]:
        """/healthz, for a liveness probe: 200 while the probes go in and while the
        trace loop polls; 503 once it has not for HUNG_S (a hung serve: restart it)."""
        since = metrics.polled_s()
        if self.ready.is_set() and since is not None and since > HUNG_S:
            start_response("503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [f"cudaprobe: the trace loop has not polled for {since:.0f} s\n".encode()]
        start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"ok\n" if self.ready.is_set() else b"starting: the probes go in\n"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
