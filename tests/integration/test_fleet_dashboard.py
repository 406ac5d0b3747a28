"""The fleet dashboard (deploy/grafana) against a real Prometheus scraping a
real `serve`: every panel's query, as Grafana would send it with one node
chosen, returns the series the workload made, and every variable's query
the values to choose from.

serve follows `-- sh`, which runs the fake GPU of the --gpu-time tests twice
(its CUPTI records, written by the program itself, are what a GPU would
have given: the GPU-time panel reads the series serve --gpu-time exports
from them) and then becomes fleet_node, which makes a round of calls per
line it reads. The test waits for a scrape between steps, so that each
counter has two samples that differ and every rate is above 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request

import pytest

from cudaprobe import __version__
from cudaprobe.analysis.metrics import LATENCY_BOUNDS_S

from ..conftest import HANG_S, REPO, cudaprobe_cmd
from .fleet import fleet_env, fleet_libs, fleet_node
from .running import Lines
from .test_gputime import GPULINES, PYTHON, fake_gpu, launch_line
from .test_serve_prometheus import PROMETHEUS, WAIT_S, Prometheus, free_port, stop

DASHBOARD = REPO / "deploy" / "grafana" / "cudaprobe-dashboard.json"
NODE = "gpu-node-7"
# what Grafana puts for the variables: this node, every process and function, and
# for the intervals a window longer than the test
CHOSEN = {"$node": NODE, "$namespace": ".*", "$process": ".*", "$function": ".*",
          "$__rate_interval": "1h", "$__range": "1h"}
FAKE_LAUNCHES = 20
CALLS_PER_ROUND = 34  # fleet_node's runtime calls in one round


def as_sent(expr: str) -> str:
    for name, value in CHOSEN.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def label_values(prometheus: Prometheus, query: str) -> set[str]:
    """What Grafana's label_values(SELECTOR, LABEL) lists."""
    m = re.fullmatch(r"label_values\((.*), (\w+)\)", as_sent(query))
    assert m, query
    url = f"{prometheus.url}/api/v1/series?" + urllib.parse.urlencode({"match[]": m.group(1)})
    with urllib.request.urlopen(url, timeout=HANG_S) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return {s[m.group(2)] for s in body["data"] if m.group(2) in s}


@pytest.fixture
def node(tmp_path):
    """serve --gpu-time on sh (fake GPU, then fleet_node), Prometheus scraping it."""
    if not PROMETHEUS.exists():
        pytest.skip("no /usr/bin/prometheus: run scripts/setup")
    if not PYTHON.exists():
        pytest.skip(f"no {PYTHON}")
    target = f"127.0.0.1:{free_port()}"
    exe, lib = fake_gpu()
    # a Python program's launches from two lines (the Python lines panel) and the fake GPU,
    # twice, then fleet_node
    script = ('"$3" "$4" "$5" 20 10 </dev/null >/dev/null && "$0" $2 1 >/dev/null && read go'
              ' && "$3" "$4" "$5" 20 10 </dev/null >/dev/null && "$0" $2 1 >/dev/null'
              ' && exec "$1"')
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", target, "--gpu-time", "--py-stacks",
                      *fleet_libs(), "--lib", str(lib), "--", "sh", "-c", script, str(exe),
                      str(fleet_node()), str(FAKE_LAUNCHES), str(PYTHON), str(GPULINES),
                      str(lib)),
        env={**fleet_env(), "RANK": "2"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    out, err = Lines(serve.stdout), Lines(serve.stderr)
    prometheus = None
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=WAIT_S)
        prometheus = Prometheus(tmp_path, target, labels={"node": NODE})
        yield prometheus, serve, out, err
    finally:
        if prometheus is not None:
            stop(prometheus.proc)
        stop(serve)


def test_every_panel_and_variable_returns_data(node):
    prometheus, serve, out, err = node
    prometheus.wait_for('count(cudaprobe_gpu_line_seconds_total{process="python3.11"})', 2)
    gpu = 'sum(cudaprobe_gpu_kernel_duration_seconds_count{kernel="fake_vecadd()"})'
    prometheus.wait_for(gpu, FAKE_LAUNCHES)  # the first fake GPU run, scraped
    serve.stdin.write("go\n")  # the second; then fleet_node
    serve.stdin.flush()
    prometheus.wait_for(gpu, 2 * FAKE_LAUNCHES)
    prometheus.wait_for('sum(cudaprobe_gpu_kernel_duration_seconds_count{kernel="line_kernel()"})',
                        60)  # the Python program's second run, scraped
    calls = 'sum(cudaprobe_calls_total{process="fleet_node", api="runtime"})'
    for n in (1, 2):
        serve.stdin.write("round\n")
        serve.stdin.flush()
        out.wait_for(lambda s, n=n: s == f"round {n}", f"round {n}", timeout=WAIT_S)
        prometheus.wait_for(calls, n * CALLS_PER_ROUND)
    prometheus.wait_for('sum(cudaprobe_memory_live_bytes{process="fleet_node",kind="device"})',
                        2 * (2 << 20))

    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert label_values(prometheus, variables["node"]["query"]["query"]) == {NODE}
    assert "fleet_node" in label_values(prometheus, variables["process"]["query"]["query"])
    assert {"cudaMalloc", "cudaMemcpy", "cudaLaunchKernel", "cudaStreamSynchronize"} <= \
        label_values(prometheus, variables["function"]["query"]["query"])

    panels = {p["title"]: p["targets"][0]["expr"] for p in board["panels"] if p["type"] != "row"}
    got = {title: prometheus.query(as_sent(expr)) for title, expr in panels.items()}
    for title, series in got.items():
        assert series, f"{title}: no data for {as_sent(panels[title])}"

    def by(title: str, *labels: str) -> dict[tuple, float]:
        return {tuple(dict(k)[name] for name in labels): v for k, v in got[title].items()}

    assert by("Calls by function and process", "process", "function")[
        ("fleet_node", "cudaMemcpy")] > 0
    # the job labels: fleet_node's rank (RANK=2), no pod or Slurm job here
    assert by("Calls by job", "rank")[("2",)] > 0
    errors = {k: v for k, v in by("Errors by function and process", "process", "function",
                                    "error").items() if k[0] == "fleet_node"}
    # the 2 TiB cudaMalloc, refused at both layers
    assert set(errors) == {("fleet_node", "cudaMalloc", "cudaErrorMemoryAllocation"),
                           ("fleet_node", "cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY")}
    assert all(v > 0 for v in errors.values())
    les = by("Call latency", "le")
    assert len(les) == len(LATENCY_BOUNDS_S) + 1 and les[("+Inf",)] > 0
    # 200 µs synchronizes: the 99th percentile is at least the bucket above 200 µs
    assert by("p99 latency by function", "function")[("cudaStreamSynchronize",)] >= 0.0002
    launches = by("Top kernels by launches", "kernel")
    assert launches[("fleet_gemm",)] > launches[("fleet_reduce",)] > 0  # 5 and 3 a round
    assert by("Top kernels by GPU time", "kernel")[("fake_vecadd()",)] > 0
    lines = by("Top Python lines by GPU time", "process", "line")
    # the C program's launches (the fake GPU's): in a process that runs no Python
    assert set(lines) == {("python3.11", launch_line("heavy")),
                          ("python3.11", launch_line("light")),
                          ("gputime_fake_gp", "(no Python frame)")}
    assert lines[("python3.11", launch_line("heavy"))] > lines[
        ("python3.11", launch_line("light"))] > 0
    copied = by("Bytes copied by direction", "kind")
    assert copied[("HostToDevice",)] > copied[("DeviceToHost",)] > 0
    live = by("Live memory by process", "node", "process", "kind")
    assert live[(NODE, "fleet_node", "device")] == 2 * (2 << 20)
    assert live[(NODE, "fleet_node", "host-pinned")] == 2 * (64 << 10)
    assert set(got["Lost events"].values()) == {0}
    assert by("Tracers by version", "version") == {(__version__,): 1}

    serve.stdin.close()  # fleet_node's input ends: it exits, and serve with it
    assert serve.wait(timeout=WAIT_S) == 0, err.text()
    err._thread.join(timeout=WAIT_S)
    assert ", 0 lost" in err.text()
