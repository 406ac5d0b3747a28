"""--otlp and its options, shared by trace and serve (the sinks they make are
output/otlp_sinks.py's).

opentelemetry-sdk is an extra (`pip install 'cudaprobe[otlp]'`): it is
imported only when --otlp is given, and its absence is one line, exit 2,
before anything is attached.
"""

from __future__ import annotations

from typing import Callable

import click

from cudaprobe.commands.options import FiniteRange
from cudaprobe.errors import UsageError
from cudaprobe.output.otlp_model import OtlpConfig, Selection, otlp_endpoints, parse_duration
from cudaprobe.output.otlp_sinks import load_sink


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


def otlp_options(f: Callable) -> Callable:
    """--otlp ENDPOINT, --otlp-slow, --otlp-sample, --otlp-service, --otlp-no-spans,
    --otlp-no-metrics, --otlp-interval and --otlp-timeout: passed on as keyword arguments otlp,
    otlp_slow ...;
    otlp_config(**those) makes them one OtlpConfig."""
    options = [
        click.option("--otlp", metavar="ENDPOINT",
                     help="Send a span per call and the metrics over OTLP/HTTP to ENDPOINT, "
                          "e.g. http://collector:4318 (/v1/traces and /v1/metrics are "
                          "appended; a URL ending in one of them is taken as it is)."),
        click.option("--otlp-slow", type=Duration(), metavar="DURATION",
                     help="Spans only for calls taking at least DURATION (100us, 5ms, 1s), "
                          "failed calls and calls in flight at the end."),
        click.option("--otlp-sample", type=FiniteRange(0, 1), metavar="RATIO",
                     help="Spans for this fraction of the other calls, drawn at random. "
                          "Default: 1 (every call), 0 with --otlp-slow."),
        click.option("--otlp-service", metavar="NAME", default="cudaprobe",
                     help="The service.name resource attribute."),
        click.option("--otlp-no-spans", is_flag=True, help="Send the metrics only."),
        click.option("--otlp-no-metrics", is_flag=True,
                     help="Send the spans only (for a backend that takes traces only)."),
        click.option("--otlp-interval", type=FiniteRange(min=0.1), default=10.0,
                     metavar="SECONDS", help="Time between metric exports."),
        click.option("--otlp-timeout", type=FiniteRange(min=0.1), default=5.0,
                     metavar="SECONDS",
                     help="How long one export may take, retries included, and the flush "
                          "of what is left at the end; then it counts as not delivered."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def otlp_config(otlp: str | None, otlp_slow: int | None, otlp_sample: float | None,
                otlp_service: str, otlp_no_spans: bool, otlp_no_metrics: bool,
                otlp_interval: float, otlp_timeout: float) -> OtlpConfig | None:
    """The options as one OtlpConfig, or None without --otlp; checks that the SDK
    can be imported, so that its absence is said before anything starts."""
    if otlp is None:
        given = [name for name, value in (("--otlp-slow", otlp_slow),
                                          ("--otlp-sample", otlp_sample),
                                          ("--otlp-no-spans", otlp_no_spans or None),
                                          ("--otlp-no-metrics", otlp_no_metrics or None))
                 if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} goes with --otlp ENDPOINT")
        return None
    if otlp_no_spans and otlp_no_metrics:
        raise UsageError("--otlp-no-spans and --otlp-no-metrics leave nothing to send")
    config = OtlpConfig(otlp_endpoints(otlp), Selection(slow_ns=otlp_slow, sample=otlp_sample),
                        service=otlp_service, spans=not otlp_no_spans,
                        metrics=not otlp_no_metrics, interval_s=otlp_interval,
                        timeout_s=otlp_timeout)
    load_sink()
    return config
