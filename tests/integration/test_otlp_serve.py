"""cudaprobe serve --otlp: the node daemon's metrics (and spans) pushed to an
OTLP/HTTP receiver run by the test, without --prometheus."""

from __future__ import annotations

import collections

from ..conftest import build_workload
from ..otlp_receiver import PATIENT, OtlpReceiver, attributes
from .conftest import expected_calls, run_cudaprobe


def test_serve_pushes_metrics_and_slow_or_failed_spans(libcudart):
    exe = build_workload("runtime_calls.c")
    with OtlpReceiver() as r:
        proc = run_cudaprobe("serve", "--otlp", r.url, *PATIENT, "--otlp-interval", "0.2",
                             "--otlp-slow", "10s", "--lib", str(libcudart), "--", str(exe), "3")
        spans = [s for _, s in r.spans()]
        metrics = r.metrics()
    assert proc.returncode == 0, proc.stderr
    made = collections.Counter(t["event"] for t in expected_calls(proc.stdout))
    assert sum(made.values()) == 30
    counted = collections.Counter()
    for p in metrics["cuda.api.calls"].sum.data_points:
        a = attributes(p.attributes)
        assert a["process.executable.name"] == "runtime_calls" and a["cuda.api"] == "runtime"
        counted[a["cuda.function"]] += p.as_int
    assert counted == made
    # none took 10 s, but every call failed (no GPU): all are sent
    assert collections.Counter(s.name for s in spans) == made
    assert "serving Prometheus" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "OTLP" in line]
    exports = len(r.requests["/v1/metrics"])  # one at the end, and one per interval before
    assert said == [f"cudaprobe: OTLP: 30 spans sent to {r.url}/v1/traces; metrics sent to "
                    f"{r.url}/v1/metrics ({exports} export{'s' * (exports != 1)})"], said
