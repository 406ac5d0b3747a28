"""--otlp metrics: metrics.py's counts, as OTLP data points, pushed on a timer.

CallMetrics has already aggregated every call (its latency histogram in
OTLP's explicit-bucket layout), so its snapshot is turned into the SDK's
MetricsData and given to the OTLPMetricExporter as it is. A MeterProvider
with a PeriodicExportingMetricReader would instead want each call's
duration recorded a second time into its own histogram: the same numbers,
paid per call. Everything is cumulative since the start of the trace.
Needs opentelemetry-sdk: imported only when --otlp is given.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from cudaprobe import __version__
from cudaprobe.analysis.metrics import LATENCY_BOUNDS_S, CallMetrics, Snapshot
from cudaprobe.output.otlp_model import OtlpConfig
from cudaprobe.targets.jobs import JOB_ATTRIBUTES

CUMULATIVE = AggregationTemporality.CUMULATIVE

# metric name, unit, description, the Snapshot field, its key's attribute names
COUNTERS = (
    ("cuda.api.calls", "{call}", "Completed CUDA API calls", "calls",
     ("cuda.function", "cuda.api", "process.executable.name", *JOB_ATTRIBUTES)),
    ("cuda.api.errors", "{call}", "CUDA API calls that returned an error", "errors",
     ("cuda.function", "cuda.result.name", "process.executable.name", *JOB_ATTRIBUTES)),
    ("cuda.memcpy.bytes", "By", "Bytes copied by successful copies, by direction",
     "memcpy_bytes", ("cuda.memcpy.kind", "cuda.api")),
    ("cuda.memset.bytes", "By", "Bytes set by successful memsets", "memset_bytes",
     ("cuda.api",)),
    ("cudaprobe.events.lost", "{event}", "Events lost, by cause, as the summary counts them",
     "lost", ("cudaprobe.loss.cause",)),
    ("cudaprobe.gpu_time.refusals", "{process}", "Processes the GPU-time library could not "
     "go into, by reason", "gpu_time_refusals", ("cudaprobe.gpu_time.reason",)),
    ("cudaprobe.gpu.line.time", "s", "Kernels' GPU time by the Python line that launched them "
     "(serve --gpu-time --py-stacks)", "gpu_lines",
     ("cudaprobe.python.line", "process.executable.name", *JOB_ATTRIBUTES)),
)


def metrics_data(snapshot: Snapshot, resource: Resource, start_ns: int,
                 now_ns: int) -> MetricsData:
    """A Snapshot as OTLP metrics; times in epoch ns."""
    metrics = []
    for name, unit, description, attr, keys in COUNTERS:
        points = [NumberDataPoint(_attributes(keys, key), start_ns, now_ns, value)
                  for key, value in getattr(snapshot, attr).items()]
        if points:
            metrics.append(Metric(name, description, unit, Sum(points, CUMULATIVE, True)))
    live = [NumberDataPoint(_attributes(("process.executable.name", *JOB_ATTRIBUTES,
                                         "cuda.memory.kind"), key),
                            start_ns, now_ns, value)
            for key, value in snapshot.live_bytes.items()]
    if live:
        metrics.append(Metric("cuda.memory.usage", "Memory allocated and not yet freed", "By",
                              Sum(live, CUMULATIVE, False)))
    latency = [HistogramDataPoint(_attributes(("cuda.function", "cuda.api"), key), start_ns,
                                  now_ns, h.count, h.sum_s, list(h.counts),
                                  list(LATENCY_BOUNDS_S), None, None)
               for key, h in snapshot.latency.items()]
    if latency:
        metrics.append(Metric("cuda.api.duration", "Duration of CUDA API calls", "s",
                              Histogram(latency, CUMULATIVE)))
    if snapshot.gpu_lines_unjoined is not None:  # serve --gpu-time --py-stacks
        points = [NumberDataPoint({"cudaprobe.gpu.line.reason": reason}, start_ns, now_ns, n)
                  for reason, n in sorted(snapshot.gpu_lines_unjoined.items())]
        metrics.append(Metric("cudaprobe.gpu.line.unjoined", "CUPTI's records of launches "
                              "made while the probes were on, not given a line", "{record}",
                              Sum(points, CUMULATIVE, True)))
    if snapshot.gpu_time_processes is not None:  # serve --gpu-time into running processes
        n = NumberDataPoint({}, start_ns, now_ns, snapshot.gpu_time_processes)
        metrics.append(Metric("cudaprobe.gpu_time.processes", "Processes the GPU-time library "
                              "was put in", "{process}", Sum([n], CUMULATIVE, True)))
    if snapshot.sampling_ratio < 1:  # serve --duty: the counts above are estimates
        ratio = NumberDataPoint({}, start_ns, now_ns, snapshot.sampling_ratio)
        metrics.append(Metric("cudaprobe.sampling.ratio", "The fraction of the time the probes "
                              "are on (serve --duty): the counts are what was seen over it",
                              "1", Gauge([ratio])))
        if snapshot.sampling_relative_error:
            spread = [NumberDataPoint({"quantity": q}, start_ns, now_ns, v)
                      for q, v in sorted(snapshot.sampling_relative_error.items())]
            metrics.append(Metric("cudaprobe.sampling.relative_error", "The relative standard "
                                  "error of the scaled totals, from the spread of the slices "
                                  "(serve --duty)", "1", Gauge(spread)))
    scope = InstrumentationScope("cudaprobe", __version__)
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


def _attributes(names: tuple[str, ...], key: object) -> dict[str, object]:
    """The key's values by name; a job attribute the process has none of ("") left out."""
    values = key if isinstance(key, tuple) else (key,)
    return {n: v for n, v in zip(names, values) if v != "" or n not in JOB_ATTRIBUTES}


class MetricsPusher:
    """Exports `metrics.snapshot()` every `config.interval_s`, and once more at
    shutdown(); `failed(why, url)` hears of an export that did not go through."""

    def __init__(self, metrics: CallMetrics, config: OtlpConfig, resource: Resource,
                 start_ns: int, failed: Callable[..., None]) -> None:
        self.metrics = metrics
        self.resource = resource
        self.start_ns = start_ns
        self.url = config.endpoints.metrics
        self.failed = failed
        self.tried = self.sent = 0
        self.exporter = OTLPMetricExporter(endpoint=self.url, timeout=config.timeout_s,
                                           compression=Compression.Gzip)
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(config.interval_s,),
                                        daemon=True, name="cudaprobe-otlp-metrics")
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.push()

    def push(self) -> None:
        with self._lock:
            self._push()

    def _push(self) -> None:
        if self._closed:  # (the thread's last push, come after shutdown's: nothing to add)
            return
        data = metrics_data(self.metrics.snapshot(), self.resource, self.start_ns,
                            time.time_ns())
        self.tried += 1
        if self.exporter.export(data) is MetricExportResult.SUCCESS:
            self.sent += 1
        else:
            self.failed(url=self.url)

    def shutdown(self) -> None:
        """The last export, then the exporter shut, under the lock: the thread's
        push that woke meanwhile finds it closed (an export on a shut exporter
        fails, and was counted as not delivered)."""
        self._stop.set()
        with self._lock:
            self._push()
            self._closed = True
            self.exporter.shutdown()

    def outcome(self) -> str:
        """What became of the exports (the last one may still be under way)."""
        if self.sent < self.tried:
            return f"{self.tried - self.sent} of {self.tried} metric exports to {self.url} " \
                   "not delivered"
        return f"metrics sent to {self.url} ({self.sent} export{'s' * (self.sent != 1)})"
