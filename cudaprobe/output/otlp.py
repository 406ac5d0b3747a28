"""--otlp: a span per call (or per chosen call) and the metrics, sent with
opentelemetry-sdk over OTLP/HTTP protobuf (docs/otlp.md).

The SDK is an extra: this module is imported only when --otlp is given.
Spans go through a BatchSpanProcessor, off the tracing thread. Its queue is
bounded, and so that nothing is dropped unseen the sink bounds it first:
spans handed over and not yet exported or failed never exceed QUEUE_SIZE,
and the ones that would are counted (`otlp_queue_full`), as are the ones the
collector did not take (`otlp_export_failed`) and the ones still unsent when
the flush at the end ran out of time (`otlp_unsent`). They go into the
summary's `undelivered` (not its losses: every row was written), and the
first of each kind is said on stderr when it happens.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from cudaprobe import __version__
from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import CallTree, call_trees
from cudaprobe.output.base import Reporter
from cudaprobe.output.otlp_model import OtlpConfig, is_error, span_attributes

QUEUE_SIZE = 8192
BATCH_SIZE = 512
SCHEDULE_MS = 1000
SCOPE = "cudaprobe"

_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")
_HTTP = re.compile(r"code: (\d+), reason: (.+)")


class ExportErrors(logging.Handler):
    """OpenTelemetry's own log lines: kept off stderr (cudaprobe says what
    happened, once, and counts), the most telling reason kept for that."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reason: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        text = " ".join(record.getMessage().split())
        if m := _ERRNO.search(text):
            self.reason = m.group(0).strip()
        elif m := _HTTP.search(text):
            self.reason = f"HTTP {m.group(1)} {m.group(2)}"
        elif self.reason is None:
            self.reason = text[:200]

    @classmethod
    def install(cls) -> ExportErrors:
        """In place of the previous sink's, if any."""
        handler = cls()
        logger = logging.getLogger("opentelemetry")
        for old in [h for h in logger.handlers if isinstance(h, cls)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
        return handler


@dataclass
class Delivery:
    """Spans: handed to the SDK, and what became of them."""

    ended: int = 0
    exported: int = 0
    failed: int = 0
    queue_full: int = 0

    @property
    def pending(self) -> int:
        return self.ended - self.exported - self.failed

    def lost(self) -> dict[str, int]:
        counts = {"otlp_queue_full": self.queue_full, "otlp_export_failed": self.failed,
                  "otlp_unsent": self.pending}
        return {k: v for k, v in counts.items() if v}


class OtlpSink(Reporter):
    """Spans for the calls it is given; `metrics` (a CallMetrics, fed by someone
    else) exported beside them, every `config.interval_s` and at the end."""

    name = "otlp"

    def __init__(self, config: OtlpConfig, notify: Callable[[str], None],
                 metrics: object | None = None) -> None:
        super().__init__(stream=None)  # type: ignore[arg-type]
        self.config = config
        self.notify = notify
        self.metrics = metrics
        self.delivery = Delivery()
        self.left_out = 0  # calls --otlp-slow/--otlp-sample did not choose
        self.errors = ExportErrors.install()
        self._said: set[str] = set()
        self._offset = 0
        self._provider: TracerProvider | None = None
        self._pusher = None

    def start(self) -> None:
        # ts_ns is CLOCK_MONOTONIC: one offset, taken now, makes it epoch time
        self._offset = time.time_ns() - time.monotonic_ns()
        resource = Resource.create({"service.name": self.config.service,
                                    "service.version": __version__,
                                    "host.name": socket.gethostname()})
        if self.config.spans:
            self._provider = TracerProvider(resource=resource, sampler=ALWAYS_ON,
                                            shutdown_on_exit=False)
            self._provider.add_span_processor(BatchSpanProcessor(
                _span_exporter(self), max_queue_size=QUEUE_SIZE,
                max_export_batch_size=min(BATCH_SIZE, QUEUE_SIZE),
                schedule_delay_millis=SCHEDULE_MS))
            self._tracer = self._provider.get_tracer(SCOPE, __version__)
        if self.metrics is not None:
            from cudaprobe.output.otlp_metrics import MetricsPusher  # noqa: PLC0415 (only with metrics)

            self._pusher = MetricsPusher(self.metrics, self.config, resource,
                                         start_ns=time.time_ns(), failed=self.export_failed)

    def calls(self, calls: list[Call]) -> None:
        if self._provider is not None:
            self._send(call_trees(calls))

    def finish(self, summary: Summary) -> None:
        if self.metrics is not None:
            self.metrics.set_lost(summary.lost)  # type: ignore[attr-defined]
        flush_s = self.config.timeout_s  # spans and metrics together
        for url in self._close(time.monotonic() + flush_s):  # each said as its own
            self.export_failed(self.errors.reason or f"no answer in {flush_s:g}s", url=url)
        # spans are a copy of rows already written: what did not arrive is said
        # beside the losses (--strict counts it), not among the calls lost
        summary.undelivered.update(self.delivery.lost())
        self.notify(self._outcome())

    def export_failed(self, why: str | None = None, url: str | None = None) -> None:
        """Said once per endpoint, from the exporting thread; counted elsewhere."""
        endpoints = self.config.endpoints
        url = url or (endpoints.traces if self._provider is not None else endpoints.metrics)
        if url not in self._said:
            self._said.add(url)
            reason = why or self.errors.reason or "see the collector's log"
            self.notify(f"OTLP export to {url} failing ({reason}): tracing goes on, "
                        "what is not delivered is counted")

    def _send(self, trees: list[CallTree]) -> None:
        for tree in trees:
            if not self.config.selection.wants(tree):
                self.left_out += len(tree)
            elif self.delivery.pending + len(tree) > QUEUE_SIZE:
                self.delivery.queue_full += len(tree)
                if "queue" not in self._said:
                    self._said.add("queue")
                    self.notify(f"OTLP queue full ({QUEUE_SIZE} spans not yet exported): spans "
                                "dropped and counted; --otlp-slow or --otlp-sample send fewer")
            else:
                self._span_tree(tree)

    def _span_tree(self, tree: CallTree) -> None:
        parent = self._start_span(tree.call, None)
        if tree.children:
            context = trace.set_span_in_context(parent)
            for child in tree.children:
                self._end_span(self._start_span(child, context), child)
        self._end_span(parent, tree.call)

    def _start_span(self, call: Call, context) -> Span:
        span = self._tracer.start_span(call.event, context=context, kind=SpanKind.INTERNAL,
                                       attributes=span_attributes(call),
                                       start_time=call.ts_ns + self._offset)
        if is_error(call):
            span.set_status(Status(StatusCode.ERROR, call.ret_name))
        return span

    def _end_span(self, span: Span, call: Call) -> None:
        # a call still running when the trace ended: its span ends there
        end = time.monotonic_ns() if call.in_flight else call.ts_ns + call.duration_ns
        span.end(end_time=end + self._offset)
        self.delivery.ended += 1

    def _close(self, deadline: float) -> list[str]:
        """Flush and shut down, within the deadline; the endpoints whose flush
        ran out of it (spans' and metrics' apart: one may be up, the other not)."""
        closers = []
        if self._provider is not None:  # shutdown() flushes what is queued
            closers.append((self._provider, self.config.endpoints.traces))
        if self._pusher is not None:
            closers.append((self._pusher, self.config.endpoints.metrics))
        threads = [(threading.Thread(target=c.shutdown, daemon=True,
                                     name="cudaprobe-otlp-close"), url) for c, url in closers]
        for t, _url in threads:
            t.start()
        for t, _url in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [url for t, url in threads if t.is_alive()]

    def _outcome(self) -> str:
        d = self.delivery
        parts = []
        if self._provider is not None:
            lost = d.lost()
            offered = d.ended + d.queue_full
            if lost:
                detail = ", ".join(f"{k}={v}" for k, v in lost.items())
                parts.append(f"{sum(lost.values())} of {offered} spans not delivered to "
                             f"{self.config.endpoints.traces} ({detail})")
            else:
                parts.append(f"{plural(d.exported, 'span')} sent to "
                             f"{self.config.endpoints.traces}")
            if self.left_out:
                parts.append(f"{plural(self.left_out, 'call')} not chosen by "
                             "--otlp-slow/--otlp-sample")
        if self._pusher is not None:
            parts.append(self._pusher.outcome())
        return "OTLP: " + "; ".join(parts)


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _span_exporter(sink: OtlpSink) -> OTLPSpanExporter:
    """The OTLP/HTTP protobuf exporter, counting what it delivers and what it does not."""
    delivery = sink.delivery

    class CountingSpanExporter(OTLPSpanExporter):
        def export(self, spans) -> SpanExportResult:
            result = super().export(spans)
            if result is SpanExportResult.SUCCESS:
                delivery.exported += len(spans)
            else:
                delivery.failed += len(spans)
                sink.export_failed()
            return result

    config = sink.config
    return CountingSpanExporter(endpoint=config.endpoints.traces, timeout=config.timeout_s,
                                compression=Compression.Gzip)
