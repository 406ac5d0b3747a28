"""What --otlp sends, without OpenTelemetry imported: the endpoints, which calls
become spans, and each span's attributes (docs/otlp.md has the table).

Pure functions of Calls, so they are unit-tested without the SDK, root or a GPU.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any, Union
from urllib.parse import urlsplit, urlunsplit

from cudaprobe.analysis.metrics import copy_of
from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import CallTree
from cudaprobe.errors import UsageError

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"

# results that say "not yet", not "failed": polling stream and event queries
NOT_ERRORS = frozenset({"cudaErrorNotReady", "CUDA_ERROR_NOT_READY"})

_BYTES_ARGS = ("count", "ByteCount", "size", "bytesize")
_DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

AttributeValue = Union[str, bool, int, float, list]


@dataclass(frozen=True)
class Endpoints:
    traces: str
    metrics: str


def otlp_endpoints(endpoint: str) -> Endpoints:
    """OTLP/HTTP URLs from --otlp: a base endpoint gets /v1/traces and /v1/metrics
    appended (as OTEL_EXPORTER_OTLP_ENDPOINT); a URL that already ends in one of
    them is taken as it is for that signal, and the other is its sibling."""
    text = endpoint.strip()
    bare = "://" not in text
    if bare:
        text = "http://" + text
    not_endpoint = UsageError(f"--otlp {endpoint!r} is not an OTLP/HTTP endpoint such as "
                              "http://collector:4318")
    try:
        parts = urlsplit(text)
    except ValueError:  # an unclosed [IPv6 address
        raise not_endpoint from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise not_endpoint
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"--otlp {endpoint!r}: the port is not a number") from None
    if bare and port is None:  # a word such as `notaurl`: a typo more often than a host
        raise not_endpoint
    path = parts.path.rstrip("/")
    for suffix in (TRACES_PATH, METRICS_PATH):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break

    def url(suffix: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, path + suffix, parts.query, ""))

    return Endpoints(traces=url(TRACES_PATH), metrics=url(METRICS_PATH))


def parse_duration(text: str) -> int:
    """'100us', '5ms', '1.5s', '250ns' -> nanoseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not a duration such as 100us, 5ms or 1s")
    return round(float(m.group(1)) * _DURATION_UNITS[m.group(2)])


def is_error(call: Call) -> bool:
    return bool(call.ret) and call.ret_name not in NOT_ERRORS


@dataclass
class Selection:
    """Which calls become spans. A call is sent when it failed, is still in
    flight, took at least `slow_ns`, or was drawn with probability `sample`.
    Without --otlp-slow the sample defaults to 1 (every call), with it to 0.
    A runtime call and the driver calls it made are chosen together."""

    slow_ns: int | None = None
    sample: float | None = None
    rng: random.Random = field(default_factory=random.Random)

    @property
    def ratio(self) -> float:
        if self.sample is not None:
            return self.sample
        return 0.0 if self.slow_ns is not None else 1.0

    def wants(self, tree: CallTree) -> bool:
        calls = [tree.call, *tree.children]
        if any(c.in_flight or is_error(c) for c in calls):
            return True
        if self.slow_ns is not None and any(c.duration_ns >= self.slow_ns for c in calls):
            return True
        ratio = self.ratio
        return ratio >= 1.0 or (ratio > 0.0 and self.rng.random() < ratio)


@dataclass
class OtlpConfig:
    """--otlp and the options that go with it."""

    endpoints: Endpoints
    selection: Selection = field(default_factory=Selection)
    service: str = "cudaprobe"
    spans: bool = True
    metrics: bool = True
    interval_s: float = 10.0  # between metric exports
    timeout_s: float = 5.0  # one export, retries included; and the flush at the end


def call_bytes(call: Call) -> int | None:
    """Bytes set or allocated, where an argument says so."""
    args = call.args
    if "width" in args and "height" in args:  # cudaMemcpy2D*: rows of width bytes
        return args["width"] * args["height"]
    for key in _BYTES_ARGS:
        if isinstance(args.get(key), int):
            return args[key]
    return None


@functools.cache  # argument names: catalogue data, a few hundred
def snake_case(name: str) -> str:
    """devPtr -> dev_ptr, ByteCount -> byte_count, gridDim -> grid_dim."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def span_attributes(call: Call) -> dict[str, AttributeValue]:
    """A span's attributes: OpenTelemetry's process/thread/code keys, and cuda.*."""
    attrs: dict[str, AttributeValue] = {
        "cuda.api": call.api,
        "cuda.function": call.event,
        "cuda.category": call.category,
        "code.function.name": call.event,
        "process.pid": call.pid,
        "process.executable.name": call.process,
        "thread.id": call.tid,
    }
    if call.in_flight:
        attrs["cuda.in_flight"] = True
    else:
        attrs["cuda.result.code"] = call.ret
        if call.ret_name:
            attrs["cuda.result.name"] = call.ret_name
        if is_error(call):
            attrs["error.type"] = call.ret_name or str(call.ret)
    copy = copy_of(call)  # direction and bytes as the metrics count them
    if copy is not None:
        attrs["cuda.memcpy.kind"], attrs["cuda.memcpy.bytes"] = copy
    elif call.category == "memory":
        nbytes = call_bytes(call)
        if nbytes is not None:
            attrs["cuda.memory.bytes"] = nbytes
    if "func_name" in call.args:
        attrs["cuda.kernel.name"] = call.args["func_name"]
    for name, value in call.args.items():
        if name != "func_name" and value is not None:
            attrs["cuda.arg." + snake_case(name)] = _attribute_value(value)
    return attrs


def _attribute_value(value: Any) -> AttributeValue:
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)  # dim3
    return str(value)
