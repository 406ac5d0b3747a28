"""The sinks --otlp puts beside a reporter: spans of the calls, and the
metrics that a MetricsSink beside them keeps. opentelemetry-sdk is an extra,
imported only here (load_sink), when --otlp is given."""

from __future__ import annotations

from typing import Callable

from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.errors import CudaprobeError
from cudaprobe.output.base import Reporter
from cudaprobe.output.fanout import Fanout
from cudaprobe.output.metrics_sink import MetricsSink
from cudaprobe.output.otlp_model import OtlpConfig
from cudaprobe.targets.jobs import Jobs

INSTALL = "pip install 'cudaprobe[otlp]'"


def otlp_sink(config: OtlpConfig, notify: Callable[[str], None],
              metrics: CallMetrics | None) -> Reporter:
    """The --otlp sink: spans for the calls it is given, and `metrics` (unless
    --otlp-no-metrics), which the caller feeds (a MetricsSink beside it)."""
    return load_sink()(config, notify, metrics if config.metrics else None)


def with_otlp(reporter: Reporter, config: OtlpConfig | None, notify: Callable[[str], None]
              ) -> tuple[Reporter, Callable[[dict[str, int]], None] | None]:
    """`reporter`, and beside it the metrics and the --otlp sink when configured;
    with the session's on_counters, which keeps the metrics' losses current."""
    if config is None:
        return reporter, None
    if not config.metrics:
        return Fanout(reporter, [otlp_sink(config, notify, None)]), None
    metrics = CallMetrics(jobs=Jobs())
    return Fanout(reporter, [MetricsSink(metrics), otlp_sink(config, notify, metrics)]), \
        metrics.set_lost


def load_sink() -> type[Reporter]:
    try:
        from cudaprobe.output.otlp import OtlpSink  # noqa: PLC0415 (the SDK is an extra)
    except ImportError as e:
        if not (e.name or "").startswith(("opentelemetry", "google")):
            raise
        raise CudaprobeError(f"--otlp needs opentelemetry-sdk and its OTLP/HTTP exporter "
                             f"({e.name} is missing): {INSTALL}") from None
    return OtlpSink
