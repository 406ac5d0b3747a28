"""An OTLP/HTTP receiver for the tests: POST /v1/traces and /v1/metrics,
protobuf bodies (gzip or deflate encoded too) decoded with opentelemetry-proto
and kept, as a collector would receive them."""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

SIGNALS = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}


# the receiver always answers, but on a loaded machine it may take seconds:
# cudaprobe waits for it (--otlp-timeout) rather than count its exports undelivered
PATIENT_S = 60.0
PATIENT = ("--otlp-timeout", f"{PATIENT_S:g}")


class OtlpReceiver:
    """`with OtlpReceiver() as r:` serves on r.url (127.0.0.1, a free port)."""

    def __init__(self) -> None:
        self.requests: dict[str, list] = {path: [] for path in SIGNALS}
        self.encodings: set[str] = set()
        self.bad: list[str] = []  # what was not a valid OTLP request
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "identity")
                receiver.encodings.add(encoding)
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                signal = SIGNALS.get(self.path)
                if signal is None or self.headers.get("Content-Type") != "application/x-protobuf":
                    receiver.bad.append(f"{self.path} {self.headers.get('Content-Type')}")
                    self.send_error(404)
                    return
                request = signal[0]()
                request.ParseFromString(body)
                receiver.requests[self.path].append(request)
                reply = signal[1]().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[dict, object]]:
        """Every span received: (its resource's attributes, the Span message)."""
        out = []
        for request in self.requests["/v1/traces"]:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                out += [(resource, span) for ss in rs.scope_spans for span in ss.spans]
        return out

    def metrics(self) -> dict[str, list]:
        """The last export's metrics by name (they are cumulative)."""
        if not self.requests["/v1/metrics"]:
            return {}
        last = self.requests["/v1/metrics"][-1]
        return {m.name: m for rm in last.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics}


def attributes(kvs) -> dict[str, object]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def any_value(v: AnyValue) -> object:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None
